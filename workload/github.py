"""The seed's GitHub model as a simulated OLTP database that emits Debezium events.

The simulation keeps the true table contents (`state`), so what an ingest must end up with is known
independently of how lakemv parses and applies events. Events include everything a real CDC stream
throws at a consumer: snapshot reads, updates without before-images, key-only deletes, primary-key
changes (delete + create), duplicates, replays of old events (resurrection attempts), skewed
(Zipf-like) popularity, and updates of the columns views join on.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lakemv.catalog.declarations import SourceTable
from lakemv.workload.debezium import connect_schema, envelope, write_landing_files

Key = tuple[Any, ...]
Row = dict[str, Any]
BASE_MICROS = 1_700_000_000_000_000  # 2023-11-14
STATUSES = ("open", "closed", "merged")
WORDS = ("fast", "tiny", "lake", "stream", "graph", "cloud", "rust", "delta", "query", "cache", "view", "join")

# (weight, operation) of a change round; noise (duplicates, replays) is added on top.
OPERATIONS = (
    (6, "user_create"), (4, "user_rename"), (1, "user_touch"), (2, "user_delete"), (1, "user_email_change"),
    (4, "repo_create"), (5, "repo_describe"), (3, "repo_star_count"), (1, "repo_delete"), (1, "repo_rename"),
    (8, "pr_create"), (5, "pr_status"), (3, "pr_author"), (1, "pr_delete"),
    (10, "star_create"), (4, "star_delete"),
    (3, "payment_create"), (4, "payment_toggle"), (1, "payment_delete"),
)  # fmt: skip


@dataclass(frozen=True)
class WorkloadConfig:
    """Size and shape of a generated workload."""

    users: int
    seed: int = 42
    rounds: int = 3  # round 0 is the initial snapshot; the rest are change rounds
    changes_per_round: int | None = None  # default: max(50, users // 2)
    noise: float = 0.1  # share of extra events that are duplicates or replays
    start_micros: int = BASE_MICROS  # the source clock's start (it advances 1 ms - 5 s an event)

    @property
    def round_changes(self) -> int:
        return self.changes_per_round if self.changes_per_round is not None else max(50, self.users // 2)


class GitHubWorkload:
    """Simulated GitHub database; `rounds()` yields each round's events per table."""

    def __init__(self, config: WorkloadConfig, sources: Mapping[str, SourceTable]):
        self.config = config
        self.sources = {name: sources[name] for name in ("users", "repos", "pull_requests", "stars", "payment_info")}
        self.rng = random.Random(config.seed)
        self.state: dict[str, dict[Key, Row]] = {name: {} for name in self.sources}
        self.order: dict[str, list[Key]] = {name: [] for name in self.sources}  # popularity rank order
        self.lsn = 10_000_000
        self.clock = config.start_micros
        self.serial = 0
        self.replay_pool: list[tuple[str, dict[str, Any]]] = []
        self.events: dict[str, list[dict[str, Any]]] = {}

    # ---- helpers -------------------------------------------------------------------------------
    def _key(self, table: str, row: Row) -> Key:
        return tuple(row[k] for k in self.sources[table].primary_key)

    def _next(self) -> str:
        self.serial += 1
        return f"{self.serial:07d}"

    def _now(self) -> int:
        self.clock += self.rng.randrange(1_000, 5_000_000)
        return self.clock

    def _pick(self, table: str, skew: float = 1.0) -> Row | None:
        """A live row, biased towards the front of the popularity order when skew > 1."""
        order, rows = self.order[table], self.state[table]
        for _ in range(20):
            if not order:
                return None
            index = int(len(order) * self.rng.random() ** skew)
            row = rows.get(order[index])
            if row is not None:
                return row
        self.order[table] = [k for k in order if k in rows]
        return rows[self.order[table][0]] if self.order[table] else None

    def _emit(self, table: str, op: str, before: Row | None, after: Row | None, snapshot: bool = False) -> None:
        self.lsn += self.rng.randrange(8, 200)
        event = envelope(self.sources[table], op, before, after, self.lsn, self.clock // 1000, snapshot)
        self.events.setdefault(table, []).append(event)
        pool = self.replay_pool
        if len(pool) < 5000:
            pool.append((table, event))
        elif self.rng.random() < 0.2:
            pool[self.rng.randrange(len(pool))] = (table, event)

    def _insert(self, table: str, row: Row, op: str = "c") -> None:
        key = self._key(table, row)
        if key in self.state[table]:
            return
        self.state[table][key] = row
        self.order[table].append(key)
        self._emit(table, op, None, row, snapshot=op == "r")

    def _update(self, table: str, row: Row, changes: Row) -> None:
        new = {**row, **changes}
        self.state[table][self._key(table, row)] = new
        before = None if self.rng.random() < 0.5 else dict(row)  # REPLICA IDENTITY DEFAULT: often null
        self._emit(table, "u", before, new)

    def _delete(self, table: str, row: Row) -> None:
        del self.state[table][self._key(table, row)]
        pk = self.sources[table].primary_key
        form = self.rng.random()
        if form < 0.5:
            before = {k: row[k] for k in pk}  # key-only delete
        elif form < 0.75:
            before = {c: (row[c] if c in pk else None) for c in row}  # key set, other fields null
        else:
            before = dict(row)
        self._emit(table, "d", before, None)

    # ---- row factories -------------------------------------------------------------------------
    def _user(self) -> Row:
        n = self._next()
        micros = self._now()
        return {"id": int(n), "email": f"user{n}@example.com", "username": f"user{n}", "registered_at": micros}

    def _repo(self, owner: str) -> Row:
        millis = self._now() // 1000 * 1000
        words = self.rng.sample(WORDS, 2)
        return {
            "name": f"{words[0]}-{words[1]}-{self._next()}",
            "owner": owner,
            "description": f"A {words[0]} {words[1]} project",
            "star_count": 0,
            "fork_count": self.rng.randrange(0, 20),
            "created_at": millis,
            "updated_at": millis,
        }

    def _pull_request(self, repo: Row, author: str) -> Row:
        return {
            "title": f"Improve {self.rng.choice(WORDS)} handling",
            "repo": repo["name"],
            "repo_owner": repo["owner"],
            "index": self.rng.randrange(1, 10**6),
            "author": author,
            "status": "open",
            "created_at": self._now(),
        }

    def _star(self, username: str, repo: Row) -> Row:
        return {"username": username, "repo_name": repo["name"], "repo_owner": repo["owner"], "created_at": self._now()}

    def _payment(self, user: Row) -> Row:
        return {"id": int(self._next()), "user_id": user["id"], "verified": self.rng.random() < 0.5}

    # ---- rounds --------------------------------------------------------------------------------
    def _snapshot(self) -> None:
        users = self.config.users
        for _ in range(users):
            self._insert("users", self._user(), "r")
        for _ in range(users // 2):
            self._insert("repos", self._repo(self._pick("users", 2.0)["username"]), "r")  # type: ignore[index]
        for _ in range(users):
            self._insert("pull_requests", self._pull_request(self._pick("repos", 2.0), self._pick("users", 3.0)["username"]), "r")  # type: ignore[arg-type,index]
        for _ in range(users * 3 // 2):
            self._insert("stars", self._star(self._pick("users", 1.5)["username"], self._pick("repos", 3.0)), "r")  # type: ignore[arg-type,index]
        for _ in range(users // 2):
            self._insert("payment_info", self._payment(self._pick("users")), "r")  # type: ignore[arg-type]

    def _operate(self, name: str) -> None:  # noqa: C901 - one branch per operation reads best
        user = self._pick("users", 3.0)
        repo = self._pick("repos", 3.0)
        if name == "user_create" or user is None:
            self._insert("users", self._user())
        elif name == "user_rename":
            self._update("users", user, {"username": f"{user['username'].split('~')[0]}~{self._next()}"})
        elif name == "user_touch":
            self._update("users", user, {"registered_at": self._now()})
        elif name == "user_delete":
            self._delete("users", user)
        elif name == "user_email_change":
            self._delete("users", user)
            self._insert("users", {**user, "email": f"moved{self._next()}@example.org"})
        elif name == "repo_create" or repo is None:
            self._insert("repos", self._repo(user["username"]))
        elif name == "repo_describe":
            self._update("repos", repo, {"description": f"{self.rng.choice(WORDS)} v{self._next()}", "updated_at": self._now() // 1000 * 1000})
        elif name == "repo_star_count":
            self._update("repos", repo, {"star_count": repo["star_count"] + self.rng.randrange(1, 50)})
        elif name == "repo_delete":
            self._delete("repos", repo)
        elif name == "repo_rename":
            self._delete("repos", repo)
            self._insert("repos", {**repo, "name": f"{repo['name'].split('~')[0]}~{self._next()}"})
        elif name.startswith("pr_"):
            pr = self._pick("pull_requests")
            if name == "pr_create" or pr is None:
                self._insert("pull_requests", self._pull_request(repo, user["username"]))
            elif name == "pr_status":
                self._update("pull_requests", pr, {"status": self.rng.choice(STATUSES)})
            elif name == "pr_author":
                self._update("pull_requests", pr, {"author": user["username"]})
            else:
                self._delete("pull_requests", pr)
        elif name == "star_create":
            self._insert("stars", self._star(self._pick("users", 1.5)["username"], repo))  # type: ignore[index]
        elif name == "star_delete":
            star = self._pick("stars")
            if star is not None:
                self._delete("stars", star)
        else:
            payment = self._pick("payment_info")
            if name == "payment_create" or payment is None:
                self._insert("payment_info", self._payment(user))
            elif name == "payment_toggle":
                self._update("payment_info", payment, {"verified": not payment["verified"]})
            else:
                self._delete("payment_info", payment)

    def _change_round(self) -> None:
        weights = [w for w, _ in OPERATIONS]
        names = [n for _, n in OPERATIONS]
        replayable = list(self.replay_pool)  # events of earlier rounds only
        for name in self.rng.choices(names, weights, k=self.config.round_changes):
            self._operate(name)
        emitted = [(t, e) for t, es in self.events.items() for e in es]
        for _ in range(int(self.config.round_changes * self.config.noise)):
            if replayable and self.rng.random() < 0.5:
                table, event = self.rng.choice(replayable)  # replay of an old event
            else:
                table, event = self.rng.choice(emitted)  # duplicate within the round
            target = self.events.setdefault(table, [])  # an old event of a table quiet this round
            target.insert(self.rng.randrange(len(target) + 1), event)

    def change_round(self, changes: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """The events of one round of `changes` random operations (default: the configured size), noise included."""
        self.events, configured = {}, self.config
        if changes is not None:
            self.config = replace(configured, changes_per_round=changes)
        try:
            self._change_round()
        finally:
            self.config = configured
        return self.events

    def operate(self, name: str, count: int = 1) -> dict[str, list[dict[str, Any]]]:
        """The events of `count` operations `name` (see OPERATIONS), without noise."""
        if name not in {n for _, n in OPERATIONS}:
            raise ValueError(f"unknown operation {name!r}")
        self.events = {}
        for _ in range(count):
            self._operate(name)
        return self.events

    def describe_repo(self, owner: str, name: str) -> dict[str, list[dict[str, Any]]]:
        """The event of one edit of a repository's description."""
        self.events = {}
        repo = self.state["repos"][(owner, name)]
        self._update("repos", repo, {"description": f"{self.rng.choice(WORDS)} v{self._next()}"})
        return self.events

    def star_repo(self, owner: str, name: str, stars: int) -> dict[str, list[dict[str, Any]]]:
        """The events of `stars` new stars of one repository, by users who had not starred it."""
        self.events = {}
        repo = self.state["repos"][(owner, name)]
        fans = {s["username"] for s in self.state["stars"].values() if (s["repo_owner"], s["repo_name"]) == (owner, name)}
        users = [u["username"] for u in self.state["users"].values() if u["username"] not in fans]
        for username in self.rng.sample(users, min(stars, len(users))):
            self._insert("stars", self._star(username, repo))
        return self.events

    def most_starred_repo(self) -> tuple[tuple[str, str], int]:
        """((owner, name), stars) of the live repository with the most live stars."""
        counts = Counter((s["repo_owner"], s["repo_name"]) for s in self.state["stars"].values())
        live = ((key, n) for key, n in counts.most_common() if key in self.state["repos"])
        return next(live)

    def rounds(self) -> Iterator[dict[str, list[dict[str, Any]]]]:
        """Yield, per round, the events emitted for each table (round 0: snapshot)."""
        for number in range(self.config.rounds):
            self.events = {}
            if number == 0:
                self._snapshot()
            else:
                self._change_round()
            yield self.events

    def live_rows(self, table: str) -> list[Row]:
        """The true current contents of `table` (timestamps as epoch micros)."""
        return [dict(row) for row in self.state[table].values()]


def generate_files(config: WorkloadConfig, sources: Mapping[str, SourceTable], out: Path) -> tuple[GitHubWorkload, int, int]:
    """Run the whole workload, writing each round's landing files; return (workload, events, files)."""
    workload = GitHubWorkload(config, sources)
    schemas = {name: connect_schema(source) for name, source in workload.sources.items()}
    layout = random.Random(config.seed + 1)  # file layout has its own stream: events depend on the seed only
    events = files = 0
    for number, round_events in enumerate(workload.rounds()):
        for table, table_events in round_events.items():
            written = write_landing_files(
                out, table, table_events, schemas[table], layout, f"r{number:04d}", files=1 + len(table_events) // 20000
            )
            events += len(table_events)
            files += len(written)
    return workload, events, files
