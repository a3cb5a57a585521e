"""The store's aggregate states: a replayed unit reads what its first attempt read, however far that got."""

from __future__ import annotations

from lakemv.core.state.store import Store


def test_a_replay_reads_the_states_its_first_attempt_read():
    store = Store(":memory:")
    assert not store.tallies_known("v", "f1", "w0")
    store.set_tallies("v", "f1", [(("a",), (2, "3.50")), (("b",), (1, "1.00"))], built_by="w0")
    assert not store.tallies_known("v", "f1", "w0")  # a replay of the unit that built them builds them again
    assert store.tallies_known("v", "f1", "w1") and not store.tallies_known("v", "f2", "w1")
    assert store.tallies("v", [("a",), ("b",), ("c",)], "w1") == {("a",): (2, "3.50"), ("b",): (1, "1.00")}
    store.put_tallies("v", [(("a",), (3, "4.50")), (("b",), None), (("c",), (1, "0.10"))], "w1")
    # the next unit reads w1's states; a replay of w1 reads those w1 started from
    assert store.tallies("v", [("a",), ("b",), ("c",)], "w2") == {("a",): (3, "4.50"), ("c",): (1, "0.10")}
    assert store.tallies("v", [("a",), ("b",), ("c",)], "w1") == {("a",): (2, "3.50"), ("b",): (1, "1.00")}
    store.put_tallies("v", [(("a",), (3, "4.50"))], "w1")  # the replay writes the same again: prev stays w1's start
    assert store.tallies("v", [("a",)], "w1") == {("a",): (2, "3.50")}
    store.put_tallies("v", [(("a",), (4, "5.00"))], "w2")
    assert store.tallies("v", [("a",)], "w2") == {("a",): (3, "4.50")} and store.tallies("v", [("a",)], "w3") == {("a",): (4, "5.00")}
    store.forget_tallies("v")
    assert not store.tallies_known("v", "f1", "w3") and store.tallies("v", [("a",)], "w3") == {}
