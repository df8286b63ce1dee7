#!/usr/bin/env python3
"""The linearizability checker (linearizability.py) on histories known to be good and known
to be bad, so that a failover test that passes it means something."""
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from linearizability import Op, Undecided, check, check_history  # noqa: E402


def put(v, call, ret, client=0):
    return Op(client, "put", value=v, call=call, ret=ret)


def get(v, call, ret, client=0):
    return Op(client, "get", result=v, call=call, ret=ret)


def cas(x, v, ok, call, ret, client=0):
    return Op(client, "cas", value=v, expect=x, ok=ok, call=call, ret=ret)


class CheckerTest(unittest.TestCase):
    def assertLinearizable(self, ops):
        self.assertEqual(check(ops)[0], True, ops)

    def assertNot(self, ops):
        self.assertEqual(check(ops)[0], False, ops)

    def test_sequential(self):
        self.assertLinearizable([put("a", 0, 1), get("a", 2, 3), cas("a", "b", True, 4, 5),
                                 cas("a", "c", False, 6, 7), get("b", 8, 9)])
        self.assertLinearizable([get(None, 0, 1)])

    def test_a_stale_read_is_caught(self):
        self.assertNot([put("a", 0, 1), get(None, 2, 3)])
        # A write acknowledged, then a later read of the value before it (a lost write).
        self.assertNot([put("a", 0, 1), put("b", 2, 3), get("a", 4, 5)])

    def test_reads_of_concurrent_writes_may_go_either_way(self):
        self.assertLinearizable([put("a", 0, 10), get(None, 1, 2), get("a", 3, 4)])
        self.assertLinearizable([put("a", 0, 10), put("b", 0, 10), get("a", 11, 12)])
        self.assertLinearizable([put("a", 0, 10), put("b", 0, 10), get("b", 11, 12)])
        # But not back: once a read saw the write, a later read cannot miss it.
        self.assertNot([put("a", 0, 10), get("a", 1, 2), get(None, 3, 4)])

    def test_two_winning_compare_and_sets_are_caught(self):
        self.assertNot([put("a", 0, 1), cas("a", "b", True, 2, 10, 1),
                        cas("a", "c", True, 2, 10, 2)])
        # A failed condition must have seen another value.
        self.assertNot([put("a", 0, 1), cas("a", "b", False, 2, 3)])
        self.assertLinearizable([put("a", 0, 1), cas("a", "b", True, 2, 10, 1),
                                 cas("a", "c", False, 2, 10, 2), get("b", 11, 12)])

    def test_a_value_never_written_is_caught(self):
        self.assertNot([put("a", 0, 1), get("z", 2, 3)])

    def test_unknown_outcomes_may_or_may_not_take_effect(self):
        self.assertLinearizable([put("a", 0, None), get(None, 1, 2), get("a", 3, 4)])
        self.assertLinearizable([put("a", 0, None), get(None, 1, 2), get(None, 3, 4)])
        # ... but not before their call, and once seen, not undone.
        self.assertNot([get("a", 0, 1), put("a", 2, None)])
        self.assertNot([put("a", 0, None), get("a", 1, 2), get(None, 3, 4)])

    def test_many_clients_search_within_budget(self):
        # A correct register under 5 clients: a real order, then times smeared around it.
        rng = random.Random(7)
        ops, value, t = [], None, 0.0
        for n in range(300):
            client = n % 5
            start = t - rng.uniform(0, 3)
            kind = rng.choice(["put", "get", "get", "cas"])
            if kind == "put":
                op = put(f"v{n}", start, None if rng.random() < 0.02 else t + rng.uniform(0, 3),
                         client)
                value = f"v{n}"
            elif kind == "get":
                op = get(value, start, t + rng.uniform(0, 3), client)
            else:
                op = cas(value, f"v{n}", True, start, t + rng.uniform(0, 3), client)
                value = f"v{n}"
            ops.append(op)
            t += 1
        self.assertEqual(check(ops)[0], True)
        # The same history with one read made stale is caught.
        i = next(i for i, op in enumerate(ops[100:], 100)
                 if op.kind == "get" and ops[i - 10].kind == "put")
        bad = list(ops)
        bad[i] = bad[i]._replace(result="v-never")
        self.assertEqual(check(bad)[0], False)

    def test_budget(self):
        ops = [put(f"v{i}", 0, None) for i in range(40)] + [get("nothing", 1, 2)]
        with self.assertRaises(Undecided):
            check(ops, budget=1000)

    def test_keys_are_checked_apart(self):
        bad = check_history([("x", put("a", 0, 1)), ("y", get(None, 2, 3)),
                             ("x", get(None, 4, 5))])
        self.assertEqual(list(bad), ["x"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
