"""The `tables` tier's jars: Iceberg's Spark runtime, Delta Lake and the PostgreSQL JDBC driver
(tools/tables/pom.xml), fetched with Maven into ``.cache/tables/jars`` once
(``tools/maven_jars.py``)."""

from __future__ import annotations

from pathlib import Path

from tools.maven_jars import fetch_maven_jars

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "tools" / "tables" / "pom.xml"
JARS = ROOT / ".cache" / "tables" / "jars"


def fetch_table_jars(pom: Path = POM, dest: Path = JARS) -> list[Path]:
    """The jars of ``pom`` (default: the tier's) the installed PySpark lacks, fetched into
    ``dest`` once per version of ``pom``: see :func:`tools.maven_jars.fetch_maven_jars`."""
    return fetch_maven_jars(pom, dest)
