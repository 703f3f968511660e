"""The s3a jars (hadoop-aws, the AWS SDK v2 modules S3A uses, spark-hadoop-cloud) for the
installed PySpark's Hadoop, fetched with Maven into ``.cache/s3/hadoop-<version>/jars`` once.

hadoop-aws must be the version of the Hadoop client inside PySpark
(``pyspark/jars/hadoop-client-api-<version>.jar``): one pom per version under ``tools/s3/``
(3.5.0 for pyspark 4.3, 3.4.2 for pyspark 4.1). Put the jars on ``spark.jars`` and an
endpoint's settings in the conf (``tools.s3_server.S3Endpoint.spark_conf``).
"""

from __future__ import annotations

from pathlib import Path

from tools.maven_jars import fetch_maven_jars

ROOT = Path(__file__).resolve().parent.parent
POMS = ROOT / "tools" / "s3"
CACHE = ROOT / ".cache" / "s3"


def pyspark_hadoop_version() -> str:
    """The version of the Hadoop client the installed PySpark ships (``3.5.0``)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise RuntimeError(f"no hadoop-client-api-*.jar in {jars}: a PySpark without Hadoop "
                           "needs the s3a jars of the Hadoop it is given.")
    return found[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def fetch_s3_jars() -> list[Path]:
    """The s3a jars for the installed PySpark, fetched once per version of their pom
    (``tools/s3/hadoop-<version>/pom.xml``), without the jars PySpark already ships."""
    hadoop = pyspark_hadoop_version()
    pom = POMS / f"hadoop-{hadoop}" / "pom.xml"
    if not pom.exists():
        known = ", ".join(sorted(p.parent.name for p in POMS.glob("hadoop-*/pom.xml")))
        raise RuntimeError(f"no s3a jars are known for Hadoop {hadoop} (the installed "
                           f"PySpark's); add {pom.relative_to(ROOT)} like those of {known}, "
                           "with hadoop-aws of that version and the AWS SDK version it names.")
    return fetch_maven_jars(pom, CACHE / f"hadoop-{hadoop}" / "jars")
