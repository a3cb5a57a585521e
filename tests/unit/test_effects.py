"""Which incoming rows apply, and which old/new images views must look at (pure)."""

from __future__ import annotations

from lakemv.catalog.tables import DELETED, POSITION
from lakemv.core.cdc.effects import effect_of

COLUMNS = ("email", "username")


def row(email, username, position, deleted=False):
    return {"email": email, "username": username, POSITION: position, DELETED: deleted}


def test_update_gives_old_and_new_image_and_stale_changes_give_nothing():
    stored = [row("a@x", "alice", 10), row("b@x", "bob", 50)]
    incoming = [row("a@x", "alice2", 20), row("b@x", "bobby", 40)]  # the second is older than the mirror
    delta = effect_of(("email",), COLUMNS, incoming, stored)
    assert delta.applied == [0]
    assert delta.images == [("a@x", "alice"), ("a@x", "alice2")]
    assert delta.changed == [["username"], ["username"]]


def test_insert_delete_and_resurrection_against_tombstones():
    stored = [row("gone@x", None, 30, deleted=True), row("live@x", "lee", 5)]
    incoming = [
        row("new@x", "nia", 7),  # unseen key: insert, new image only
        row("live@x", None, 9, deleted=True),  # delete: old image only
        row("gone@x", "ghost", 25),  # replayed create older than its tombstone: ignored
    ]
    delta = effect_of(("email",), COLUMNS, incoming, stored)
    assert delta.applied == [0, 1]
    assert delta.images == [("new@x", "nia"), ("live@x", "lee")]
    assert delta.changed == [None, None]  # a row that appears or goes changes every column


def test_recreating_a_deleted_key_and_an_unchanged_touch():
    stored = [row("gone@x", None, 30, deleted=True), row("same@x", "sam", 5)]
    incoming = [row("gone@x", "back", 31), row("same@x", "sam", 6)]
    delta = effect_of(("email",), COLUMNS, incoming, stored)
    assert delta.applied == [0, 1]  # both move the mirror's position forward
    assert delta.images == [("gone@x", "back")]  # the touch changes no view


def test_nan_and_null_compare_as_the_store_keeps_them():
    """Values compare as Python does: the same NaN object is unchanged, NULL equals NULL, and an
    update names only the columns whose values differ."""
    nan = float("nan")
    stored = [row("a@x", nan, 1), row("b@x", None, 1)]
    incoming = [row("a@x", nan, 2), row("b@x", None, 2)]
    assert effect_of(("email",), COLUMNS, incoming, stored).images == []
    delta = effect_of(("email",), COLUMNS, [row("a@x", float("nan"), 3)], stored)
    assert delta.images == [("a@x", nan), ("a@x", delta.images[1][1])] and delta.changed == [["username"], ["username"]]
