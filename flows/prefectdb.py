"""An empty Prefect database, migrated once per Prefect version, that a new `lakemv serve` server starts from.

A Prefect server on a database that does not exist yet first runs every migration of Prefect's schema:
on these machines a server on a new database answered after 22-25 s, one on a migrated copy after
8-9 s (`prefect server start`, an idle machine). `make setup` migrates an empty database once
(`python -m lakemv.flows.prefectdb`, kept in `.setup/`); a `serve` on a lake whose Prefect database does
not exist yet starts from a copy of it. Prefect still checks the copy's revision as it starts, so a
template left by another Prefect version would only be migrated further; the template's name carries the
version anyway, and setup replaces it when Prefect changes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from lakemv.catalog.settings import PROJECT_ROOT

DATABASE = "prefect.db"  # the file Prefect's default database URL names under PREFECT_HOME
# A database the user configured is theirs: never seeded.
CONFIGURED = ("PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL")


def template_path(folder: Path = PROJECT_ROOT / ".setup") -> Path:
    return folder / f"prefect-{importlib.metadata.version('prefect')}.db"


def seed(home: Path, template: Path | None = None, database: str = DATABASE) -> bool:
    """Give the Prefect home `home` a copy of the migrated empty database (as `database`), unless it
    has one already, its database is configured elsewhere, or there is no template. Returns whether it did."""
    template = template or template_path()
    target = home / database
    if target.exists() or any(os.environ.get(name) for name in CONFIGURED) or not template.is_file():
        return False
    _copy(template, target)
    return True


def _copy(source: Path, target: Path) -> None:
    """A consistent copy of the SQLite database `source` (even one in WAL mode), in place at once."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.partial")
    with closing(sqlite3.connect(source)) as origin, closing(sqlite3.connect(partial)) as copy:
        origin.backup(copy)
    partial.replace(target)


def build(template: Path | None = None) -> Path:
    """Migrate an empty database in a scratch Prefect home and keep it as `template`."""
    template = template or template_path()
    prefect = Path(sys.executable).with_name("prefect")
    with tempfile.TemporaryDirectory(prefix="lakemv-prefect-") as scratch:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {"PREFECT_HOME": scratch}
        done = subprocess.run([str(prefect), "server", "database", "upgrade", "-y"], env=env, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0:
            raise RuntimeError(f"prefect server database upgrade failed:\n{(done.stderr or done.stdout)[-2000:]}")
        _copy(Path(scratch) / DATABASE, template)
    for old in template.parent.glob("prefect-*.db"):
        if old != template:
            old.unlink(missing_ok=True)
    return template


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet-if-present", action="store_true", help="Print nothing when the template exists.")
    args = parser.parse_args(argv)
    path = template_path()
    if path.is_file():
        if not args.quiet_if_present:
            print(f"Prefect database template: {path} (up to date)")
        return
    print("Prefect database template: migrating an empty database (about 20 s)", flush=True)
    print(f"Prefect database template: {build(path).name}")


if __name__ == "__main__":
    main()
