"""A linearizability checker for histories of one register per key (issue 23): put, get and
compare-and-set, each call with its invocation and completion times and its outcome.

The algorithm is Wing and Gong's search as improved by Lowe ("Testing for linearizability",
2017): take, in order of invocation, a call that is pending and may go next (invoked before
every pending call completed), apply it to the model, and backtrack when a completion is
reached that no order explains. A cache of (calls linearized, state) prunes repeated work.
Keys are independent registers (linearizability is compositional), so each is checked alone.

A call whose outcome is unknown (a timeout, a connection lost: the write may or may not have
been made) has no completion: it may take effect at any time after its invocation, or never.
Reads with unknown outcomes say nothing and are left out by the caller.

Ops (`Op.kind`):
  "put"   value=v: the register becomes v.
  "get"   result=v (None: the key was absent): the register must be v.
  "cas"   expect=x, value=v, ok=True: the register must be x; it becomes v.
          ok=False (the condition failed): the register must not be x.
Values must be unique per write, so that a version read maps to one write: the clients turn a
compare-and-set on a version into one on the value read with that version.
"""
import collections

Op = collections.namedtuple("Op", "client kind value expect result ok call ret")
Op.__new__.__defaults__ = (None, None, None, True, 0.0, None)

INFINITY = float("inf")


class Undecided(Exception):
    """The search went past its step budget."""


def _step(state, op):
    """The states `op` may leave `state` in (empty: it cannot be applied there)."""
    if op.kind == "put":
        states = [op.value]
    elif op.kind == "get":
        states = [state] if state == op.result else []
    elif op.kind == "cas":
        if op.ok:
            states = [op.value] if state == op.expect else []
        else:
            states = [state] if state != op.expect else []
    else:
        raise ValueError(f"unknown op kind {op.kind!r}")
    if op.ret is None:  # Unknown outcome: it may also have had no effect.
        states = states + [state] if state not in states else states
    return states


class _Event:
    __slots__ = ("index", "is_call", "match", "prev", "next")

    def __init__(self, index, is_call):
        self.index, self.is_call = index, is_call
        self.match = self.prev = self.next = None


def _lift(call):
    """Takes a call and its completion out of the list."""
    for e in (call, call.match):
        e.prev.next = e.next
        if e.next is not None:
            e.next.prev = e.prev


def _unlift(call):
    for e in (call.match, call):
        e.prev.next = e
        if e.next is not None:
            e.next.prev = e


def check(ops, initial=None, budget=2_000_000):
    """Whether the ops on one register are linearizable from `initial`: (True, None), or
    (False, the most ops any order explained). Raises Undecided past `budget` steps."""
    ops = list(ops)
    timed = []
    for i, op in enumerate(ops):
        call, ret = _Event(i, True), _Event(i, False)
        call.match = ret
        timed.append(((op.call, 0), call))
        # Calls before completions at the same time; unknown outcomes complete at infinity.
        timed.append(((INFINITY if op.ret is None else op.ret, 1), ret))
    timed.sort(key=lambda t: t[0])
    head = _Event(-1, False)
    last = head
    for _, e in timed:
        last.next, e.prev = e, last
        last = e

    state, linearized = initial, 0
    cache = set()
    stack = []  # (call, state before it, the other states it may leave)
    entry = head.next
    steps = best = 0

    def take(call, before, choices):
        """Applies the first uncached choice for `call`; False if none is left."""
        nonlocal state, linearized, entry
        while choices:
            after = choices.pop(0)
            key = (linearized | (1 << call.index), after)
            if key in cache:
                continue
            cache.add(key)
            stack.append((call, before, choices))
            state, linearized = after, linearized | (1 << call.index)
            _lift(call)
            entry = head.next
            return True
        return False

    while head.next is not None:
        steps += 1
        if steps > budget:
            raise Undecided(f"more than {budget} steps for {len(ops)} ops")
        if entry.is_call:
            if take(entry, state, _step(state, ops[entry.index])):
                best = max(best, len(stack))
            else:
                entry = entry.next
            continue
        # A completion whose call no order so far could place: undo the last choice and try
        # its next one, or the next call after it.
        while True:
            if not stack:
                return False, best
            call, before, choices = stack.pop()
            _unlift(call)
            state, linearized = before, linearized & ~(1 << call.index)
            if take(call, before, choices):
                break
            entry = call.next
            if entry is not None:
                break
    return True, None


def check_history(ops, budget=2_000_000):
    """Checks ops of many keys (Op plus a `key` given as pairs (key, Op)); returns the keys
    whose histories are not linearizable, with how many of their ops were explained."""
    by_key = collections.defaultdict(list)
    for key, op in ops:
        by_key[key].append(op)
    bad = {}
    for key, key_ops in sorted(by_key.items()):
        ok, explained = check(key_ops, budget=budget)
        if not ok:
            bad[key] = (explained, len(key_ops))
    return bad
