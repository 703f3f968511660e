"""Run by tests/secured/test_secrets.py in its own process (a Spark session with its UI on):
read the ranges with both engines, then print which markers appear in the plans (``explain``)
and in the Spark UI's SQL and environment pages and REST answers, as JSON."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import urllib.request
from pathlib import Path

from airflow_provider_kafka_spark.spark import fetch_spark_kafka_jars, read_kafka, spark_session

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    spec = json.loads(sys.argv[1])
    jars = fetch_spark_kafka_jars(ROOT / "tools" / "spark-kafka" / "pom.xml",
                                  ROOT / ".cache" / "spark-kafka" / "jars")
    spark = spark_session(jars=jars, conf={"spark.ui.enabled": "true", "spark.ui.port": "0"})
    texts = {}
    for engine, config in spec["configs"].items():
        df = read_kafka(spark, spec["ranges"], config, engine=engine)
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            df.explain(True)
        texts[f"{engine} plan"] = plan.getvalue()
        texts[f"{engine} rows"] = str(df.count())
    ui, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId
    for path in (f"/api/v1/applications/{app}/sql?details=true&planDescription=true",
                 f"/api/v1/applications/{app}/environment", "/SQL/", "/environment/",
                 "/SQL/execution/?id=0", "/SQL/execution/?id=1"):
        with urllib.request.urlopen(ui + path, timeout=30) as answer:
            texts[path] = answer.read().decode()
    print(json.dumps({where: [m for m in spec["markers"] if m in text]
                      for where, text in texts.items()} | {"rows": [texts["python rows"],
                                                                    texts["spark-kafka rows"]]}))
    spark.stop()


if __name__ == "__main__":
    main()
