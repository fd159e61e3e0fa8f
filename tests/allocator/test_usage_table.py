"""UsageTable: merging reports into `group -> broker -> entry`, and every cleanup rule of PIP-82."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.node.usage_table import OWN, CleanupRules, Merge, UsageTable
from allocator.wire.usage_report import ReportBatch, UsageReport

DIMS = ("publish_msgs_per_s", "publish_bytes_per_s")
GROUPS = np.array([30, 10, 20])  # not sorted: rows follow this order, lookups must not assume sorting
RULES = CleanupRules(stale_after_s=10.0, max_report_age_s=2.0)


def make_table(groups=GROUPS, rules=RULES) -> UsageTable:
    return UsageTable("me", np.asarray(groups), len(DIMS), rules)


def report(broker, seq, groups, usage, *, incarnation=0, sent_at_s=100.0, demand=None) -> UsageReport:
    groups = np.asarray(groups, dtype=np.int64)
    return UsageReport(
        broker=broker,
        incarnation=incarnation,
        seq=seq,
        sent_at_ms=int(round(sent_at_s * 1000)),
        interval_ms=1000,
        dimensions=DIMS,
        group_ids=groups,
        usage=np.asarray(usage, dtype=np.float64).reshape(len(groups), len(DIMS)),
        demand=None if demand is None else np.asarray(demand, dtype=np.float64).reshape(len(groups), len(DIMS)),
    )


def entry(table: UsageTable, group: int, broker: str) -> tuple[bool, np.ndarray]:
    """(present, usage[D]) of one entry; a broker never heard of reads as absent."""
    (_,), (known,) = table.local_rows(np.array([group]))
    assert known, f"group {group} is not in the table"
    usage = table.entries().get((group, broker))
    return usage is not None, np.zeros(len(DIMS)) if usage is None else usage


def slot_of(table: UsageTable, group: int, broker: str) -> tuple[int, int]:
    """(row, slot) of a broker's entry for a group (present or not)."""
    (row,), _ = table.local_rows(np.array([group]))
    (slot,) = np.flatnonzero(table.slot_broker[row] == table.brokers.index(broker))
    return row, slot


def present_groups(table: UsageTable, broker: str) -> set[int]:
    return {group for group, sender in table.entries() if sender == broker}


def test_merge_puts_each_row_in_its_group_and_the_senders_column():
    table = make_table()
    outcome = table.merge(report("b", 1, [20, 30], [[5.0, 500.0], [7.0, 700.0]]), now_s=100.0)
    assert outcome is Merge.ACCEPTED
    assert table.brokers == ["me", "b"]
    assert entry(table, 20, "b")[0] and entry(table, 30, "b")[0]
    np.testing.assert_array_equal(entry(table, 20, "b")[1], [5.0, 500.0])
    np.testing.assert_array_equal(entry(table, 30, "b")[1], [7.0, 700.0])
    assert present_groups(table, "b") == {20, 30}
    assert not table.present[:, OWN].any()  # the own column is only set by set_own
    assert not table.demand_known.any()  # the report had no demand
    np.testing.assert_array_equal(table.view_brokers(), [1, 0, 1])  # rows in GROUPS order: 30, 10, 20


def test_demand_is_stored_and_marked_known_when_the_report_carries_it():
    table = make_table()
    table.merge(report("b", 1, [10], [[5.0, 50.0]], demand=[[9.0, 90.0]]), now_s=100.0)
    row, slot = slot_of(table, 10, "b")
    np.testing.assert_array_equal(table.demand[row, slot], [9.0, 90.0])
    assert table.demand_known[row, slot]
    table.merge(report("b", 2, [10], [[6.0, 60.0]]), now_s=101.0)  # a later report without demand
    assert not table.demand_known[row, slot]


def test_set_own_fills_column_zero_for_the_groups_served():
    table = make_table()
    usage = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    table.set_own(usage, usage * 2, np.array([True, False, True]))
    np.testing.assert_array_equal(table.present[:, OWN], [True, False, True])
    np.testing.assert_array_equal(table.usage[:, OWN], usage)
    np.testing.assert_array_equal(table.demand[:, OWN], usage * 2)


def test_a_row_of_zeros_removes_only_that_entry():
    table = make_table()
    table.merge(report("b", 1, [20, 30], [[5.0, 500.0], [7.0, 700.0]]), now_s=100.0)
    assert table.merge(report("b", 2, [20], [[0.0, 0.0]]), now_s=101.0) is Merge.ACCEPTED
    assert present_groups(table, "b") == {30}
    # zero in one dimension only is still traffic
    table.merge(report("b", 3, [10], [[0.0, 64.0]]), now_s=101.0)
    assert present_groups(table, "b") == {10, 30}


def test_entries_of_others_expire_after_stale_after_s_but_the_own_column_never_does():
    table = make_table()
    table.set_own(np.ones((3, 2)), np.ones((3, 2)), np.ones(3, dtype=bool))
    table.merge(report("b", 1, [10, 20], [[1.0, 1.0], [2.0, 2.0]]), now_s=100.0)
    table.merge(report("c", 1, [10], [[3.0, 3.0]], sent_at_s=104.0), now_s=104.0)
    assert table.expire(110.0) == 0  # refreshed exactly stale_after_s ago: still fresh
    assert table.expire(110.5) == 2  # b's two entries
    assert present_groups(table, "b") == set()
    assert present_groups(table, "c") == {10}
    assert table.expire(114.5) == 1
    assert table.expire(10_000.0) == 0
    assert table.present[:, OWN].all()


def test_reports_older_than_max_report_age_are_dropped_by_publish_time():
    table = make_table()
    too_old = report("b", 1, [10], [[5.0, 5.0]], sent_at_s=97.999)
    assert table.merge(too_old, now_s=100.0) is Merge.TOO_OLD
    assert "b" not in table.brokers and not table.present.any()
    just_in_time = report("b", 1, [10], [[5.0, 5.0]], sent_at_s=98.0)
    assert table.merge(just_in_time, now_s=100.0) is Merge.ACCEPTED
    # a report from the future (a clock ahead of ours) is not too old
    assert table.merge(report("c", 1, [10], [[1.0, 1.0]], sent_at_s=105.0), now_s=100.0) is Merge.ACCEPTED


def test_same_sequence_number_is_a_duplicate_and_an_older_one_never_overwrites():
    table = make_table()
    assert table.merge(report("b", 5, [10], [[5.0, 50.0]]), now_s=100.0) is Merge.ACCEPTED
    assert table.merge(report("b", 5, [10], [[5.0, 50.0]]), now_s=100.0) is Merge.DUPLICATE
    assert table.merge(report("b", 4, [10], [[99.0, 990.0]]), now_s=100.0) is Merge.DUPLICATE
    np.testing.assert_array_equal(entry(table, 10, "b")[1], [5.0, 50.0])
    # a late zero row with an old sequence number does not remove the fresher entry either
    assert table.merge(report("b", 3, [10], [[0.0, 0.0]]), now_s=100.0) is Merge.DUPLICATE
    assert entry(table, 10, "b")[0]
    assert table.merge(report("b", 6, [10], [[6.0, 60.0]]), now_s=101.0) is Merge.ACCEPTED
    np.testing.assert_array_equal(entry(table, 10, "b")[1], [6.0, 60.0])


def test_sequence_numbers_are_checked_per_entry():
    """A late report covering a fresher entry and an older one updates only the older one."""
    table = make_table()
    table.merge(report("b", 7, [20], [[7.0, 70.0]]), now_s=100.0)
    late = report("b", 6, [20, 30], [[6.0, 60.0], [6.5, 65.0]])
    assert table.merge(late, now_s=100.0) is Merge.ACCEPTED
    np.testing.assert_array_equal(entry(table, 20, "b")[1], [7.0, 70.0])
    np.testing.assert_array_equal(entry(table, 30, "b")[1], [6.5, 65.0])


def test_an_expired_entry_is_not_revived_by_a_late_copy_but_is_by_a_newer_report():
    table = make_table()
    table.merge(report("b", 3, [10], [[3.0, 3.0]]), now_s=100.0)
    table.expire(111.0)
    assert table.merge(report("b", 3, [10], [[3.0, 3.0]], sent_at_s=110.0), now_s=111.0) is Merge.DUPLICATE
    assert not entry(table, 10, "b")[0]
    assert table.merge(report("b", 4, [10], [[4.0, 4.0]], sent_at_s=111.0), now_s=111.0) is Merge.ACCEPTED
    assert entry(table, 10, "b")[0]


def test_a_higher_incarnation_voids_what_the_old_one_said():
    table = make_table()
    table.merge(report("b", 40, [20, 30], [[5.0, 5.0], [7.0, 7.0]], incarnation=0), now_s=100.0)
    # the restarted broker counts its sequence numbers from 1 again
    assert table.merge(report("b", 1, [20], [[2.0, 2.0]], incarnation=1), now_s=101.0) is Merge.ACCEPTED
    assert present_groups(table, "b") == {20}
    np.testing.assert_array_equal(entry(table, 20, "b")[1], [2.0, 2.0])
    stale = report("b", 41, [10, 20, 30], [[9.0, 9.0]] * 3, incarnation=0)
    assert table.merge(stale, now_s=101.0) is Merge.OLD_INCARNATION
    assert present_groups(table, "b") == {20}
    np.testing.assert_array_equal(entry(table, 20, "b")[1], [2.0, 2.0])


def test_remove_broker_clears_its_column_and_nothing_else():
    table = make_table()
    table.set_own(np.ones((3, 2)), np.ones((3, 2)), np.ones(3, dtype=bool))
    table.merge(report("b", 1, [10, 20], [[1.0, 1.0], [2.0, 2.0]]), now_s=100.0)
    table.merge(report("c", 1, [10], [[3.0, 3.0]]), now_s=100.0)
    assert table.remove_broker("b") is True
    assert present_groups(table, "b") == set()
    assert present_groups(table, "c") == {10}
    assert table.present[:, OWN].all()
    assert table.remove_broker("nobody") is False
    assert table.remove_broker("me") is False  # the own column is not the membership's to remove
    assert table.present[:, OWN].all()


def test_remove_broker_with_an_older_incarnation_keeps_the_live_one():
    table = make_table()
    table.merge(report("b", 1, [10], [[1.0, 1.0]], incarnation=2), now_s=100.0)
    assert table.remove_broker("b", incarnation=1) is False
    assert entry(table, 10, "b")[0]
    assert table.remove_broker("b", incarnation=2) is True
    assert not entry(table, 10, "b")[0]


def test_a_late_report_of_a_removed_incarnation_does_not_bring_it_back():
    """Membership never revives a dead incarnation; a copy still in the channel must not either."""
    table = make_table()
    table.merge(report("b", 1, [10], [[1.0, 1.0]], incarnation=2), now_s=100.0)
    table.remove_broker("b", incarnation=2)
    late = report("b", 2, [10, 20], [[2.0, 2.0], [2.0, 2.0]], incarnation=2, sent_at_s=100.5)
    assert table.merge(late, now_s=101.0) is Merge.OLD_INCARNATION
    assert present_groups(table, "b") == set()
    restarted = report("b", 1, [20], [[3.0, 3.0]], incarnation=3, sent_at_s=101.0)
    assert table.merge(restarted, now_s=101.0) is Merge.ACCEPTED
    assert present_groups(table, "b") == {20}
    # without an incarnation, whatever incarnation was live is the dead one
    assert table.remove_broker("b") is True
    assert table.merge(report("b", 2, [20], [[3.0, 3.0]], incarnation=3), now_s=101.0) is Merge.OLD_INCARNATION
    assert table.merge(report("b", 1, [20], [[4.0, 4.0]], incarnation=4), now_s=101.0) is Merge.ACCEPTED


def test_groups_the_table_does_not_hold_are_ignored():
    table = make_table()
    mixed = report("b", 1, [99, 20, 5], [[9.0, 9.0], [2.0, 2.0], [5.0, 5.0]])
    assert table.merge(mixed, now_s=100.0) is Merge.ACCEPTED
    assert present_groups(table, "b") == {20}
    np.testing.assert_array_equal(entry(table, 20, "b")[1], [2.0, 2.0])
    foreign = report("c", 1, [99, 5, 40], [[9.0, 9.0]] * 3)
    assert table.merge(foreign, now_s=100.0) is not Merge.ACCEPTED
    assert present_groups(table, "c") == set()
    assert int(table.present.sum()) == 1


def test_a_table_of_no_groups_ignores_every_report():
    table = make_table(groups=np.array([], dtype=np.int64))
    assert table.merge(report("b", 1, [10], [[1.0, 1.0]]), now_s=100.0) is not Merge.ACCEPTED
    assert table.present.shape == (0, table.present.shape[1])
    assert table.expire(1000.0) == 0


@pytest.mark.parametrize("n_brokers", [4, 5, 8, 9, 16, 17, 40])
def test_growing_the_columns_keeps_every_entry(n_brokers):
    table = make_table()
    table.set_own(np.full((3, 2), 0.5), np.full((3, 2), 0.5), np.ones(3, dtype=bool))
    for index in range(1, n_brokers):
        groups = [10, 20] if index % 2 else [30]
        table.merge(report(f"b{index}", 1, groups, [[index, 100.0 * index]] * len(groups)), now_s=100.0)
    assert table.n_brokers == n_brokers
    assert table.n_slots == 1 + n_brokers // 2  # itself and the most brokers of one group: 10 and 20 get the odd
    assert table.present.shape[1] >= table.n_slots
    for index in range(1, n_brokers):
        groups = {10, 20} if index % 2 else {30}
        assert present_groups(table, f"b{index}") == groups
        for group in groups:
            np.testing.assert_array_equal(entry(table, group, f"b{index}")[1], [index, 100.0 * index])
    np.testing.assert_array_equal(table.usage[:, OWN], np.full((3, 2), 0.5))
    expected_view = 1 + np.array([(n_brokers - 1) // 2, (n_brokers) // 2, (n_brokers) // 2])
    np.testing.assert_array_equal(table.view_brokers(), expected_view)  # rows: 30, 10, 20


def test_slots_follow_the_brokers_of_each_group_not_the_brokers_of_the_cluster():
    """100 brokers, each sharing 2 of 50 groups with this one (4 brokers per group): the table is [50, 5], not
    [50, 101], so what a round costs does not grow with the size of the cluster."""
    groups = np.arange(50)
    table = make_table(groups=groups)
    for broker in range(100):
        shared = [(2 * broker) % 50, (2 * broker + 1) % 50]
        table.merge(report(f"b{broker}", 1, shared, [[1.0, 1.0]] * 2), now_s=100.0)
    assert table.n_brokers == 101 and len(table.entries()) == 200
    assert table.n_slots == 5 and table.usage.shape[:2] == table.present.shape == (50, 5)  # exactly the slots used
    np.testing.assert_array_equal(table.view_brokers(), np.full(50, 4))


def test_a_removed_or_restarted_broker_frees_its_slots_for_others():
    table = make_table()
    table.merge(report("b", 1, [10, 20], [[1.0, 1.0]] * 2), now_s=100.0)
    table.merge(report("c", 1, [10], [[2.0, 2.0]]), now_s=100.0)
    assert table.n_slots == 3 and slot_of(table, 10, "c") == (slot_of(table, 10, "c")[0], 2)
    table.remove_broker("b")
    table.merge(report("d", 1, [10, 30], [[3.0, 3.0]] * 2), now_s=100.0)
    assert slot_of(table, 10, "d")[1] == 1 and table.n_slots == 3  # b's slot, reused
    table.merge(report("c", 1, [20], [[4.0, 4.0]], incarnation=1), now_s=100.0)  # restarted: 10 is void
    assert present_groups(table, "c") == {20} and slot_of(table, 20, "c")[1] == 1
    assert (table.slot_broker[:, 2] == -1).all() and table.n_slots == 3


def test_an_absent_entry_keeps_its_slot_and_sequence_number():
    table = make_table()
    table.merge(report("b", 5, [10], [[1.0, 1.0]]), now_s=100.0)
    table.merge(report("b", 6, [10], [[0.0, 0.0]]), now_s=100.0)
    assert present_groups(table, "b") == set() and slot_of(table, 10, "b")[1] == 1
    assert table.merge(report("b", 5, [10], [[1.0, 1.0]]), now_s=100.0) is Merge.DUPLICATE  # a late copy


def test_a_batch_keeps_the_newest_entry_of_each_slot_and_counts_each_report():
    table = make_table()
    batch = [
        report("b", 2, [10, 20], [[2.0, 2.0], [2.5, 2.5]]),
        report("b", 3, [10], [[3.0, 3.0]]),
        report("b", 3, [10], [[3.0, 3.0]]),  # a duplicated copy
        report("b", 1, [10], [[1.0, 1.0]]),  # newer than the table, but the batch has b's 2 and 3: received, not lost
        report("b", 1, [30], [[1.0, 1.0]]),
        report("c", 1, [10], [[9.0, 9.0]], sent_at_s=90.0),
        report("me", 1, [10], [[9.0, 9.0]]),
    ]
    assert table.merge_many(ReportBatch.of(batch, DIMS), now_s=100.0) == [
        Merge.ACCEPTED,  # its entry of 20 stays
        Merge.ACCEPTED,
        Merge.DUPLICATE,
        Merge.SUPERSEDED,
        Merge.ACCEPTED,
        Merge.TOO_OLD,
        Merge.OWN,
    ]
    assert {key: usage[0] for key, usage in table.entries().items()} == {(10, "b"): 3.0, (20, "b"): 2.5, (30, "b"): 1.0}
    old_and_new = [report("b", 9, [10], [[5.0, 5.0]]), report("b", 1, [20], [[6.0, 6.0]], incarnation=1)]
    assert table.merge_many(ReportBatch.of(old_and_new, DIMS), now_s=101.0) == [Merge.OLD_INCARNATION, Merge.ACCEPTED]
    assert {key: usage[0] for key, usage in table.entries().items()} == {(20, "b"): 6.0}


# -- property: any sequence of merges, removals and expiries, against a plain-dict model ------------------

BROKERS = ("b1", "b2", "b3", "b4", "b5")  # more brokers than a row starts with slots: slots grow, free, reuse
HELD = (10, 20, 30)
RATES = st.sampled_from([0.0, 1.5, 4.0])

a_report = st.tuples(
    st.sampled_from(BROKERS),
    st.integers(0, 2),  # incarnation
    st.integers(0, 6),  # seq
    st.lists(st.sampled_from((*HELD, 99)), min_size=1, max_size=4, unique=True),
    st.lists(st.tuples(RATES, RATES), min_size=4, max_size=4),
    st.sampled_from([0.0, 1.0, 3.0]),  # age of the report when it arrives
)
merge_op = st.tuples(st.just("merge"), st.lists(a_report, min_size=1, max_size=4))  # received together
remove_op = st.tuples(st.just("remove"), st.sampled_from(BROKERS), st.one_of(st.none(), st.integers(0, 2)))
advance_op = st.tuples(st.just("advance"), st.sampled_from([0.5, 4.0, 11.0]))


class Model:
    """The cleanup rules written the plain way, a dict of dicts `group -> broker -> entry`."""

    def __init__(self):
        self.incarnation: dict[str, int] = {}
        self.entries: dict[int, dict[str, dict]] = {group: {} for group in HELD}
        self.batches = 0

    def merge(self, batch, now) -> list[Merge]:
        """One report after the other; returns the outcomes as `merge_many` counts them."""
        self.batches += 1
        outcomes = []
        seq_before = {(group, broker): value["seq"] for group, entries in self.entries.items()
                      for broker, value in entries.items()}  # fmt: skip
        incarnation_before = dict(self.incarnation)
        for index, (broker, incarnation, seq, groups, usage, sent_at) in enumerate(batch):
            if sent_at < now - RULES.max_report_age_s:
                outcomes.append(Merge.TOO_OLD)
                continue
            current = self.incarnation.setdefault(broker, 0)
            if incarnation < current:
                outcomes.append(Merge.OLD_INCARNATION)
                continue
            if incarnation > current:
                self.clear(broker)
                self.incarnation[broker] = incarnation
            outcomes.append(Merge.DUPLICATE)  # unless one of its entries is still there after the batch
            for group, row in zip(groups, usage, strict=True):
                old = self.entries.get(group, {}).get(broker, {"seq": -1})
                if group in HELD and seq > old["seq"]:
                    written_by = (self.batches, index)
                    self.entries[group][broker] = {"seq": seq, "usage": row, "present": any(row), "at": now,
                                                   "by": written_by}  # fmt: skip
        # counted per batch: a report from an incarnation older than another of the batch is discarded, and a
        # report is accepted when one of the entries it wrote was not replaced by a later report of the batch
        for index, (broker, incarnation, *_) in enumerate(batch):
            if outcomes[index] is not Merge.TOO_OLD and incarnation < self.incarnation[broker]:
                outcomes[index] = Merge.OLD_INCARNATION
        for entries in self.entries.values():
            for value in entries.values():
                if value["by"][0] == self.batches:
                    outcomes[value["by"][1]] = Merge.ACCEPTED
        # a report with an entry newer than the table was before the batch (a restart clears its broker first) but
        # older than the batch left there, none of its entries kept: a later report of the batch superseded it
        for index, (broker, _, seq, groups, *_) in enumerate(batch):
            cleared = incarnation_before.get(broker, 0) < self.incarnation.get(broker, 0)
            superseded = any(
                (-1 if cleared else seq_before.get((group, broker), -1))
                < seq
                < self.entries.get(group, {}).get(broker, {"seq": -1})["seq"]
                for group in groups
            )
            if outcomes[index] is Merge.DUPLICATE and superseded:
                outcomes[index] = Merge.SUPERSEDED
        return outcomes

    def clear(self, broker):
        for entries in self.entries.values():
            entries.pop(broker, None)

    def remove(self, broker, incarnation) -> bool:
        if broker not in self.incarnation:
            return False
        current = self.incarnation[broker]
        if incarnation is not None and incarnation < current:
            return False
        self.clear(broker)
        self.incarnation[broker] = max(current, incarnation if incarnation is not None else current) + 1
        return True

    def expire(self, now):
        for entries in self.entries.values():
            for value in entries.values():
                if value["present"] and value["at"] < now - RULES.stale_after_s:
                    value["present"] = False

    def present(self) -> dict[tuple[int, str], tuple[float, ...]]:
        return {
            (group, broker): value["usage"]
            for group, entries in self.entries.items()
            for broker, value in entries.items()
            if value["present"]
        }


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(merge_op, remove_op, advance_op), max_size=40))
def test_any_history_matches_the_model_and_keeps_the_invariants(ops):
    table, model = make_table(groups=np.array(HELD)), Model()
    now = 1000.0
    removed: set[str] = set()  # removed and not accepted since
    for op in ops:
        if op[0] == "merge":
            batch = [
                (broker, incarnation, seq, groups, rows[: len(groups)], round(now - age, 3))
                for broker, incarnation, seq, groups, rows, age in op[1]
            ]
            reports = [
                report(broker, seq, groups, usage, incarnation=incarnation, sent_at_s=sent_at)
                for broker, incarnation, seq, groups, usage, sent_at in batch
            ]
            got = table.merge_many(ReportBatch.of(reports, DIMS), now)
            assert got == model.merge(batch, now)
            removed -= {broker for (broker, *_), outcome in zip(batch, got, strict=True) if outcome is Merge.ACCEPTED}
        elif op[0] == "remove":
            _, broker, incarnation = op
            done = table.remove_broker(broker, incarnation)
            assert done is model.remove(broker, incarnation)
            if done:
                removed.add(broker)
        else:
            now += op[1]
            table.expire(now)
            model.expire(now)

        entries = table.entries()
        assert {key: tuple(usage) for key, usage in entries.items()} == model.present()
        assert all((usage > 0).any() for usage in entries.values())
        assert not {broker for _, broker in entries} & removed, "a removed broker still has entries"
        occupied = table.slot_broker[:, : table.n_slots]
        assert (occupied[:, OWN] == 0).all() and not table.present[:, table.n_slots :].any()
        for row in occupied:  # a broker holds at most one slot per row
            brokers = row[row >= 0]
            assert len(set(brokers.tolist())) == len(brokers)
        assert table.n_slots <= 1 + len(BROKERS)


def test_view_usage_sums_the_present_entries_and_peer_ages_count_from_each_refresh():
    table = make_table()
    table.set_own(np.array([[1.0, 10.0], [2.0, 20.0], [0.0, 0.0]]), np.zeros((3, 2)), np.array([True, True, False]))
    table.merge(report("b", 1, [30, 10], [[5.0, 50.0], [6.0, 60.0]], sent_at_s=100.0), now_s=100.0)
    table.merge(report("c", 1, [30], [[7.0, 70.0]], sent_at_s=103.0), now_s=103.0)
    np.testing.assert_array_equal(table.view_usage(), [[13.0, 130.0], [8.0, 80.0], [0.0, 0.0]])
    oldest, mean = table.peer_entry_age_s(now_s=104.0)
    np.testing.assert_array_equal(oldest[:2], [4.0, 4.0])  # group 30: b 4 s ago, c 1 s ago; group 10: b
    np.testing.assert_array_equal(mean[:2], [2.5, 4.0])
    assert np.isnan(oldest[2]) and np.isnan(mean[2])  # group 20: no peer in view
    table.merge(report("b", 2, [30], [[0.0, 0.0]], sent_at_s=104.0), now_s=104.0)  # b's traffic stopped
    oldest, mean = table.peer_entry_age_s(now_s=105.0)
    assert (oldest[0], mean[0]) == (2.0, 2.0)  # only c's entry is left for group 30


def test_a_batch_in_the_layout_of_the_last_one_goes_to_the_slots_as_they_are_now():
    """A forced report of every peer comes in the same layout round after round, and its entries go where the last
    one's went; but not after the slots moved between the two: here the registry removes c (its slots freed) and
    lists d in group 20 (d takes c's old slot), and c's next incarnation sends the same layout."""
    table = make_table()

    def layout(seq: int, rate: float, c_incarnation: int = 0) -> ReportBatch:
        b = report("b", seq, [10, 20], [[rate, 1.0], [rate, 2.0]])
        c = report("c", seq, [10, 20], [[rate, 3.0], [rate, 4.0]], incarnation=c_incarnation)
        return ReportBatch.of([b, c], DIMS)

    table.merge_many(layout(1, 5.0), 100.0)
    c_slot = slot_of(table, 20, "c")
    assert table.remove_broker("c")
    table.update_roster(np.array([20]), np.array([0]), np.array([True]), ["d"])
    assert slot_of(table, 20, "d") == c_slot
    for seq, rate in ((2, 8.0), (3, 9.0)):  # the layout of the first batch, then again
        assert table.merge_many(layout(seq, rate, c_incarnation=1), 100.0) == [Merge.ACCEPTED, Merge.ACCEPTED]
        assert not entry(table, 20, "d")[0] and slot_of(table, 20, "c") != c_slot  # listed, never heard
        for group, b_usage, c_usage in ((10, [rate, 1.0], [rate, 3.0]), (20, [rate, 2.0], [rate, 4.0])):
            np.testing.assert_array_equal(entry(table, group, "b")[1], b_usage)
            np.testing.assert_array_equal(entry(table, group, "c")[1], c_usage)


def test_a_roster_of_the_whole_cluster_applies_the_pairs_of_the_groups_held_and_learns_no_other_broker() -> None:
    """A broker's first roster lists every (group, broker) pair of the cluster (at PIP-82's size, twenty times the
    pairs of its own groups): the table applies its own groups' pairs, the last change of a pair winning, and
    learns no broker it shares no group with."""
    table = make_table()  # groups 30, 10, 20
    groups = np.array([10, 99, 20, 98, 10, 30])
    brokers = np.array([0, 1, 2, 3, 0, 4])
    serving = np.array([True, True, True, True, False, True])  # a listed in group 10, then no longer
    table.update_roster(groups, brokers, serving, ["a", "x", "b", "y", "c"])
    assert set(table.brokers) == {"me", "a", "b", "c"}
    rows, slots = np.nonzero(table.listed)
    listed = {
        (int(table.group_ids[r]), table.brokers[table.slot_broker[r, s]]) for r, s in zip(rows, slots, strict=True)
    }
    assert listed == {(20, "b"), (30, "c")}
