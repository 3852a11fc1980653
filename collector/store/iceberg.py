"""Several Iceberg tables committed at once: the rows of an ingest and the record of their files land together or not
at all, in one PostgreSQL transaction of the catalog (``collector.store.shared``).

pyiceberg commits one table at a time (``SqlCatalog.commit_table``: write the new metadata file, then a conditional
UPDATE of the table's row in ``iceberg_tables``). Here each table's changes are staged by a pyiceberg transaction
that is not committed; their metadata files are written; then one database transaction runs every table's
conditional UPDATE and commits, or none of them. This uses pyiceberg's staging helpers (``_update_and_stage_table``,
``_write_metadata``, a transaction's staged updates), which is why pyproject pins pyiceberg's minor version.

What can go wrong, and what it means for what landed, is told by the exception raised:

- ``CommitFailedException`` (pyiceberg's): a table moved since it was loaded (another writer won); nothing landed.
- ``Lost``: storage or the catalog went away before the database was asked to commit; nothing landed.
- ``Unsure``: the database was asked to commit and did not answer; whether it landed is for ``landed`` to find out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwatch.collector.store.files import one_line


class Lost(Exception):
    """Storage or the catalog lost before the commit was sent: nothing of it landed. ``where``: "storage" or
    "the catalog"."""

    def __init__(self, where: str, error: BaseException) -> None:
        super().__init__(f"{where}: {one_line(error)[:300]}")
        self.where, self.error = where, error


class Unsure(Exception):
    """The catalog lost while committing: the commit may or may not have landed."""


@dataclass(frozen=True)
class Staged:
    """One table's commit, staged: the table as loaded (the commit lands only if it is still there), and the
    pyiceberg transaction holding its changes."""

    table: Any
    transaction: Any

    @property
    def snapshot_id(self) -> int | None:
        """The snapshot this commit makes (what ``landed`` looks for)."""
        current = self.transaction.table_metadata.current_snapshot()
        return current.snapshot_id if current is not None else None


def storage_failures() -> tuple[type[BaseException], ...]:
    return (OSError,)


def catalog_failures() -> tuple[type[BaseException], ...]:
    from sqlalchemy.exc import SQLAlchemyError

    return (SQLAlchemyError,)


def commit(catalog: Any, staged: list[Staged]) -> dict[str, str]:
    """Commit every staged table in one database transaction; their new metadata locations by table name."""
    from pyiceberg.catalog.sql import IcebergTables
    from pyiceberg.table.update import AssertTableUUID
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    plans = []
    try:
        for one in staged:
            table, tx = one.table, one.transaction
            requirements = (*tx._requirements, AssertTableUUID(uuid=table.metadata.table_uuid))  # never changes
            new = catalog._update_and_stage_table(table, table.name(), requirements, tx._updates)
            catalog._write_metadata(new.metadata, new.io, new.metadata_location)
            plans.append((table, new))
    except storage_failures() as error:
        raise Lost("storage", error) from None
    try:
        session = Session(catalog.engine)
    except catalog_failures() as error:
        raise Lost("the catalog", error) from None
    with session:
        try:
            for table, new in plans:
                namespace, name = table.name()
                found = session.execute(
                    update(IcebergTables)
                    .where(
                        IcebergTables.catalog_name == catalog.name,
                        IcebergTables.table_namespace == namespace,
                        IcebergTables.table_name == name,
                        IcebergTables.metadata_location == table.metadata_location,
                    )
                    .values(metadata_location=new.metadata_location, previous_metadata_location=table.metadata_location)
                )
                if found.rowcount < 1:
                    session.rollback()
                    from pyiceberg.exceptions import CommitFailedException

                    raise CommitFailedException(f"{namespace}.{name} was changed by another writer")
        except catalog_failures() as error:
            raise Lost("the catalog", error) from None
        try:
            session.commit()
        except catalog_failures() as error:
            raise Unsure(one_line(error)[:300]) from None
    return {table.name()[1]: new.metadata_location for table, new in plans}


def landed(catalog: Any, staged: list[Staged]) -> bool:
    """Whether a commit that went unanswered landed: its first table's new snapshot is in the table now (snapshot
    ids are random 63-bit numbers: no other commit makes the same). Raises the catalog's or storage's error when
    it cannot be asked."""
    one = staged[0]
    snapshot_id = one.snapshot_id
    table = catalog.load_table(one.table.name())
    if snapshot_id is None or table.metadata_location == one.table.metadata_location:
        return False
    return table.snapshot_by_id(snapshot_id) is not None
