"""Writing a DataFrame to Kafka, and how its exactly-once guarantee works, one room per job:

``writer``        ``write_kafka`` and ``WriteResult``: the orchestration, in the order it runs
``checks``        the arguments and columns (before the cluster is touched)
``cluster``       the cluster's metadata: topics exist, ``transaction.max.timeout.ms``
``prepass``       one Spark stage over the input: bad rows, each partition's fingerprint
``plan``          ``TaskPlan`` (what every task is told); ``ExactlyOnceWrite``, the driver's
                  side of ``exactly_once``: the plan made against the ledger (tasks already
                  committed, fencing an earlier attempt), the pool slot's lease
``ledger``        the compacted topic recording which tasks of which write committed
``task``          what a Spark task runs: produce its partition, flush; or the exactly-once
                  protocol
``transactions``  the exactly-once protocol and its steps (init, commit, abort, fencing)
``producer``      the native producer of a task and the checked batches it is fed

The producer's librdkafka config is built with the other clients' configs, in
:mod:`airflow_provider_kafka_spark.offsets.config`. The public names are re-exported by
:mod:`airflow_provider_kafka_spark.spark`.
"""
