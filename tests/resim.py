#!/usr/bin/env python3
"""resim.py — re-checks `hanayo plan --json` with an independent simulator.

For every schedule over a grid of (P, M, W or v), runs `hanayo plan --json`
and, from DESIGN §1 "The schedules" alone, re-derives what the JSON claims:

  * placement: gpipe/1f1b stage s on rank s; interleaved s mod P; hanayo
    seg = s div P, j = s mod P, rank j if seg is even else P-1-j;
  * completeness: every F(m,s) and B(m,s) exactly once, on the rank that
    holds stage s;
  * the simulation: each rank runs its list in order; an action starts when
    its rank is free and its inputs have arrived (F(m,s) needs F(m,s-1);
    B(m,S-1) needs F(m,S-1); B(m,s) needs B(m,s+1) and F(m,s)); an input
    made on another rank arrives comm_cost after its producer ends. From it:
    makespan, bubble ratio, peak activations per rank and transfers, which
    must equal the JSON's to 1e-9;
  * the closed forms DESIGN §1 "The schedules" states as exact: gpipe and 1f1b reach
    (P-1)/(M+P-1), interleaved (P-1)/(vM+P-1); hanayo's peak activations
    are no higher than interleaved's at v = 2W. How close hanayo comes to
    its ideal is printed, not checked (tests/test_schedule pins it);
  * split backward (--split-backward): W(m,s) needs B(m,s) and costs
    wgrad_cost, an activation is held from F to W, every W once; under
    f = B = W = 1 and free transfers, at M = 2P, 4P, 8P, 1f1b (ZB-H1) and
    hanayo (ZB-V at W = 1, the waves beyond) reach (P-1)/(3vM+P-1), 1f1b
    holding P activations, hanayo W = 1 2P and W >= 2 at most 2WP + P-1;
  * the lower bound: for every rank, the earliest its first action can
    start, plus its work, plus what must follow its last action (the
    backwards still to travel to stage 0; nothing after a W), the largest
    over the ranks; the JSON's bound_makespan equals it and no makespan
    is below it;
  * the bound at the plan's memory: the same, but a rank cannot be busy
    before its first backward can start (the forward chain to the last
    stage, then backwards and hops down to the rank's deepest stage) for
    longer than L forwards take, L the plan's largest peak activations
    (or all its forwards when fewer): memory_bound_makespan equals it, it
    is no lower than bound_makespan, and no makespan is below it;
  * with transfer time (c = 0.05, 0.2 of a rank share, P = 2, 4, 8,
    M = 2P, 4P, 8P), hanayo W = 2's chosen order is shorter than
    interleaved v = 4's within 2WP + P - 1 activations;
  * the witness orders in tests/fixtures/hanayo-order-*.json (hanayo's
    placement, unsplit, with transfer time): each is complete and runs,
    holds no more activations than it says, ends at the makespan it says,
    and that is below interleaved v = 2W's at the same P, M and costs:
    better wave orders than hanayo's construction finds exist there
    (docs/schedules.md, "With transfer time"). Its own order's makespan is
    printed beside it;
  * schedule.max_activations (cap_checks): hanayo W = 1 split over P = 2,
    4, 8, M = 2P..16P and 512, 1024 at P = 8, c = 0..0.5, at the smallest
    cap, P and DualPipeV's 2P + 1: every capped plan re-simulates, and
    its peak stays within the cap. RESIM_CAPS=0 skips this and the three below
    (the default where the binary is a sanitizer build, HY_SANITIZE set by
    make: the capped searches run ten times slower there, and test_order
    runs them under the sanitizers already), and without RESIM_FULL=1 (as
    `make test` runs it) only M = 2P, 4P and c = 0, 0.2 of their grids are
    checked and unsplit_report is skipped;
  * the peers (peer_checks): ZB-V, DeepSeek's DualPipeV, and V-Half and
    V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory"),
    written here from their descriptions, re-simulated over the same grid
    (c = 0.01 and 0.025 too): at each one's own peak hanayo W = 1 split's
    capped choice is at or below it (asserted); W = 2 at the same bytes,
    the points short of it are printed with its bound within the cap;
  * PyTorch's interleaved zero bubble (izb_checks), written here from
    its description and equal to PyTorch's own lists in
    tests/fixtures/interleaved-zb-torch.json (izb_fixture_checks), at
    v = 4 and 2 over the same grid: valid, peak vP, and hanayo split
    W = 2 (W = 1) capped at that peak at or below it (asserted);
  * unsplit (unsplit_report): hanayo W = 1, 2 against interleaved v = 2W
    at P = 8, M up to 1024, c = 0.01..0.5: W = 1 at or below it within
    its memory (asserted); where W = 2 is behind or holds more, printed
    with its bound at interleaved's memory and what it reaches within one
    activation more.

Python 3 standard library only. Run from the repository root; the binary is
$HANAYO (default build/hanayo). Prints "resim: N passed, N failed" and exits
non-zero on any failure.
"""
import json
import os
import subprocess
import sys

HANAYO = os.environ.get("HANAYO", "build/hanayo")
TOL = 1e-9


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            if self.failed <= 40:   # enough to diagnose, not a flood
                print("FAIL: " + what, file=sys.stderr)
        return cond


def expected_placement(kind, P, S):
    if kind == "hanayo":
        return [(s % P) if (s // P) % 2 == 0 else P - 1 - (s % P)
                for s in range(S)]
    return [s % P for s in range(S)]


def deps(op, m, s, S):
    """The (op, m, s) actions this one waits for."""
    if op == "F":
        return [("F", m, s - 1)] if s > 0 else []
    if op == "W":
        return [("B", m, s)]
    if s == S - 1:
        return [("F", m, s)]
    return [("B", m, s + 1), ("F", m, s)]


def simulate(actions, S, f, b, c, w=0.0):
    """Runs every rank's list in order; returns (end time of each action,
    rank of each action, makespan, busy time per rank) or None on
    deadlock."""
    P = len(actions)
    where = {}
    for r, lst in enumerate(actions):
        for a in lst:
            where[a] = r
    end = {}
    nxt = [0] * P
    free = [0.0] * P
    busy = [0.0] * P
    left = sum(len(lst) for lst in actions)
    while left:
        progress = False
        for r in range(P):
            while nxt[r] < len(actions[r]):
                a = actions[r][nxt[r]]
                ds = deps(a[0], a[1], a[2], S)
                if any(d not in end for d in ds):
                    break
                start = free[r]
                for d in ds:
                    arrive = end[d] + (c if where[d] != r else 0.0)
                    start = max(start, arrive)
                cost = {"F": f, "B": b, "W": w}[a[0]]
                end[a] = start + cost
                free[r] = end[a]
                busy[r] += cost
                nxt[r] += 1
                left -= 1
                progress = True
        if not progress:
            return None
    makespan = max(free) if P else 0.0
    return end, where, makespan, busy


def peak_activations(actions, split=False):
    peaks = []
    last = "W" if split else "B"
    for lst in actions:
        live = peak = 0
        for op, _, _ in lst:
            live += 1 if op == "F" else -1 if op == last else 0
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def transfers(where, M, S):
    n = 0
    for m in range(M):
        for s in range(1, S):
            n += where[("F", m, s)] != where[("F", m, s - 1)]
            n += where[("B", m, s - 1)] != where[("B", m, s)]
    return n


def bound(place, P, M, S, f, b, w, c, split):
    """The lower bound on any order's makespan (see the top)."""
    return memory_bound(place, P, M, S, f, b, w, c, split, None)


def memory_bound(place, P, M, S, f, b, w, c, split, limit):
    """The lower bound for orders holding at most `limit` activations per
    rank (None: any number)."""
    hop = [c if place[s] != place[s + 1] else 0.0 for s in range(S - 1)]
    est = [0.0] * S
    for s in range(1, S):
        est[s] = est[s - 1] + f + hop[s - 1]
    tail = [0.0] * S
    for s in range(1, S):
        tail[s] = hop[s - 1] + b + tail[s - 1]
    est_b = [0.0] * S
    est_b[S - 1] = est[S - 1] + f
    for s in range(S - 2, -1, -1):
        est_b[s] = max(est[s] + f, est_b[s + 1] + b + hop[s])
    most = 0.0
    for r in range(P):
        mine = [s for s in range(S) if place[s] == r]
        if not mine:
            continue
        work = M * len(mine) * (f + b + (w if split else 0.0))
        after = 0.0 if split else min(tail[s] for s in mine)
        idle = min(est[s] for s in mine)
        if limit is not None:
            forwards = min(limit, M * len(mine))
            idle = max(idle, min(est_b[s] for s in mine) - forwards * f)
        most = max(most, idle + work + after)
    return most


def run_plan(args):
    cmd = [HANAYO, "plan", "--json"] + [str(x) for x in args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, " ".join(cmd[1:])


def check_plan(t, plan, kind, P, M, W, v, f, b, c, name, split=False, w=0.0):
    ok = t.check(plan.get("schedule") == kind and plan.get("ranks") == P and
                 plan.get("micro_batches") == M, name + ": echoes its input")
    chunks = {"gpipe": 1, "1f1b": 1, "interleaved": v, "hanayo": 2 * W}[kind]
    S = chunks * P
    t.check(plan.get("chunks_per_rank") == chunks and plan.get("stages") == S,
            name + ": chunks_per_rank %s stages %s" %
            (plan.get("chunks_per_rank"), plan.get("stages")))
    t.check(plan.get("waves") == (W if kind == "hanayo" else 0),
            name + ": waves %s" % plan.get("waves"))
    t.check(abs(plan["fwd_cost"] - f) < TOL and abs(plan["bwd_cost"] - b) < TOL
            and abs(plan["comm_cost"] - c) < TOL and abs(plan["wgrad_cost"] - w) < TOL
            and plan["split_backward"] == split, name + ": costs")
    if not ok:
        return None
    place = plan["placement"]
    t.check(place == expected_placement(kind, P, S),
            name + ": placement %s" % place)
    acts = [[tuple(a) for a in row] for row in plan["actions"]]
    t.check(len(acts) == P, name + ": %d action lists" % len(acts))
    everything = [a for row in acts for a in row]
    want = {(op, m, s) for op in ("FBW" if split else "FB") for m in range(M) for s in range(S)}
    t.check(len(everything) == len(want) and set(everything) == want,
            name + ": every F and B (and W) exactly once")
    misplaced = [(r, a) for r, row in enumerate(acts) for a in row
                 if not (0 <= a[2] < S) or expected_placement(kind, P, S)[a[2]] != r]
    t.check(not misplaced, name + ": actions off their stage's rank: %s"
            % misplaced[:3])
    if set(everything) != want or misplaced:
        return None
    sim = simulate(acts, S, f, b, c, w)
    if not t.check(sim is not None, name + ": deadlocks"):
        return None
    end, where, makespan, busy = sim
    bubble = 1.0 - sum(busy) / (P * makespan) if makespan > 0 else 0.0
    t.check(abs(plan["makespan"] - makespan) <= TOL * max(1.0, makespan),
            name + ": makespan %r, re-simulated %r" % (plan["makespan"], makespan))
    t.check(abs(plan["bubble_ratio"] - bubble) <= TOL,
            name + ": bubble %r, re-simulated %r" % (plan["bubble_ratio"], bubble))
    peaks = peak_activations(acts, split)
    t.check(plan["peak_activations"] == peaks,
            name + ": peak activations %s, re-simulated %s"
            % (plan["peak_activations"], peaks))
    n = transfers(where, M, S)
    t.check(plan["transfers"] == n,
            name + ": transfers %s, re-counted %d" % (plan["transfers"], n))
    ideal = (P - 1) / (chunks * M * (3 if split else 1) + P - 1)
    t.check(abs(plan.get("ideal_bubble", -1) - ideal) <= TOL,
            name + ": ideal_bubble %r, want %r" % (plan.get("ideal_bubble"), ideal))
    if c == 0 and not split and kind in ("gpipe", "1f1b", "interleaved"):
        t.check(abs(bubble - ideal) <= TOL,
                name + ": bubble %r, DESIGN says exactly %r" % (bubble, ideal))
    lb = bound(place, P, M, S, f, b, w, c, split)
    t.check(abs(plan["bound_makespan"] - lb) <= TOL * max(1.0, lb) and makespan >= lb - TOL * max(1.0, lb),
            name + ": bound %r, re-derived %r, makespan %r" % (plan["bound_makespan"], lb, makespan))
    mb = memory_bound(place, P, M, S, f, b, w, c, split, max(peaks))
    t.check(abs(plan["memory_bound_makespan"] - mb) <= TOL * max(1.0, mb) and mb >= lb - TOL * max(1.0, lb)
            and makespan >= mb - TOL * max(1.0, mb),
            name + ": memory bound %r, re-derived %r, bound %r, makespan %r"
            % (plan["memory_bound_makespan"], mb, lb, makespan))
    return {"bubble": bubble, "ideal": ideal, "peak": max(peaks), "makespan": makespan}


def grid():
    """(kind, P, M, W, v) points; M in {1..4, P, 2P, 3P, 4P, 8, 16, 32}."""
    for P in range(1, 9):
        Ms = sorted({1, 2, 3, 4, P, 2 * P, 3 * P, 4 * P, 8, 16, 32})
        for M in Ms:
            yield ("gpipe", P, M, 1, 1)
            yield ("1f1b", P, M, 1, 1)
            for W in range(1, 5):
                yield ("hanayo", P, M, W, 1)
            if M % P == 0:
                for v in range(1, 5):
                    yield ("interleaved", P, M, 1, v)


def plan_args(kind, P, M, W, v, f=1.0, b=2.0, c=0.0, w=None):
    args = ["--schedule", kind, "--ranks", P, "--micro-batches", M,
            "--fwd-cost", repr(f), "--bwd-cost", repr(b), "--comm-cost", repr(c)]
    if w is not None:
        args += ["--split-backward", "--wgrad-cost", repr(w)]
    if kind == "hanayo":
        args += ["--waves", W]
    if kind == "interleaved":
        args += ["--chunks", v]
    return args


def one(t, kind, P, M, W, v, f=1.0, b=2.0, c=0.0, w=None):
    """w: split backward with W costing w of the backward b (B the rest)."""
    rc, out, err, cmd = run_plan(plan_args(kind, P, M, W, v, f, b, c, w))
    if not t.check(rc == 0, "%s: exit %d: %s" % (cmd, rc, err.strip())):
        return None
    try:
        plan = json.loads(out)
    except ValueError as e:
        t.check(False, "%s: not JSON: %s" % (cmd, e))
        return None
    if w is None:
        return check_plan(t, plan, kind, P, M, W, v, f, b, c, cmd)
    return check_plan(t, plan, kind, P, M, W, v, f, b - w, c, cmd, True, w)


def split_checks(t):
    """Split backward over a grid, its closed forms, and some costs."""
    for P in range(1, 9):
        for M in sorted({1, 3, 2 * P, 4 * P, 8 * P}):
            kinds = [("gpipe", 1, 1), ("1f1b", 1, 1), ("hanayo", 1, 1), ("hanayo", 2, 1)]
            if P <= 4:
                kinds.append(("hanayo", 3, 1))
            if M % P == 0:
                kinds.append(("interleaved", 1, 2))
            for kind, W, v in kinds:
                r = one(t, kind, P, M, W, v, 1.0, 2.0, 0.0, 1.0)
                if r is None or P < 2 or M not in (2 * P, 4 * P, 8 * P):
                    continue
                if kind == "1f1b" or kind == "hanayo" and W <= 2:
                    t.check(abs(r["bubble"] - r["ideal"]) <= TOL,
                            "%s W=%d P=%d M=%d split: bubble %r, ideal %r"
                            % (kind, W, P, M, r["bubble"], r["ideal"]))
                    most = P if kind == "1f1b" else 2 * P if W == 1 else 2 * W * P + P - 1
                    t.check(r["peak"] <= most, "%s W=%d P=%d M=%d split: peak %d above %d"
                            % (kind, W, P, M, r["peak"], most))
    for kind, P, M, W, v in [("1f1b", 4, 8, 1, 1), ("interleaved", 4, 8, 1, 2),
                             ("hanayo", 4, 8, 1, 1), ("hanayo", 4, 8, 2, 1),
                             ("hanayo", 3, 5, 2, 1)]:
        for f, b, c, w in [(1.0, 2.0, 0.5, 0.5), (1.5, 2.5, 0.25, 1.5), (1.0, 3.0, 0.0, 1.0)]:
            one(t, kind, P, M, W, v, f, b, c, w)


def transfer_grid_checks(t):
    """The goal with transfer time (docs/design.md §1.5): with each rank's
    share costing f = 1, b = 2 (a quarter of that per stage at W = 2 and
    v = 4) and a transfer c = 0.05 or 0.2, over P = 2, 4, 8 and M = 2P, 4P,
    8P, the wave order hanayo chooses (re-simulated here like every plan)
    is shorter than interleaved v = 4's and holds at most interleaved's
    memory, 2WP + P - 1 activations."""
    for P in (2, 4, 8):
        for M in (2 * P, 4 * P, 8 * P):
            for c in (0.05, 0.2):
                h = one(t, "hanayo", P, M, 2, 1, 0.25, 0.5, c)
                i = one(t, "interleaved", P, M, 1, 4, 0.25, 0.5, c)
                if h is None or i is None:
                    continue
                t.check(h["makespan"] < i["makespan"] - TOL and h["peak"] <= 5 * P - 1,
                        "P=%d M=%d c=%r: hanayo %r at %d activations, interleaved %r at %d"
                        % (P, M, c, h["makespan"], h["peak"], i["makespan"], i["peak"]))


def witness_checks(t):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    for name in sorted(os.listdir(here)):
        if not (name.startswith("hanayo-order-") and name.endswith(".json")):
            continue
        w = json.load(open(os.path.join(here, name)))
        P, M, W = w["ranks"], w["micro_batches"], w["waves"]
        f, b, c = w["fwd_cost"], w["bwd_cost"], w["comm_cost"]
        S = 2 * W * P
        place = expected_placement("hanayo", P, S)
        actions = [[tuple(a) for a in lst] for lst in w["actions"]]
        want = {(op, m, s) for op in "FB" for m in range(M) for s in range(S)}
        got = [a for lst in actions for a in lst]
        t.check(len(got) == len(want) and set(got) == want, name + ": every F and B once")
        t.check(all(place[a[2]] == r for r, lst in enumerate(actions) for a in lst),
                name + ": each action on the rank holding its stage")
        sim = simulate(actions, S, f, b, c)
        if not t.check(sim is not None, name + ": runs without deadlock"):
            continue
        makespan = sim[2]
        peaks = peak_activations(actions)
        t.check(max(peaks) <= w["activation_limit"],
                name + ": peaks %s above %d" % (peaks, w["activation_limit"]))
        t.check(abs(makespan - w["makespan"]) <= 1e-6,
                name + ": makespan %r, says %r" % (makespan, w["makespan"]))
        costs = ["--fwd-cost", f, "--bwd-cost", b, "--comm-cost", c]
        rc, out, err, cmd = run_plan(["--schedule", "interleaved", "--ranks", P, "--micro-batches",
                                      M, "--chunks", 2 * W] + costs)
        if not t.check(rc == 0, cmd + ": " + err.strip()):
            continue
        inter = json.loads(out)
        t.check(inter["peak_activations"] and max(inter["peak_activations"]) >= max(peaks) and
                makespan < inter["makespan"] - TOL,
                name + ": %r at peak %d, not below interleaved's %r at %d" %
                (makespan, max(peaks), inter["makespan"], max(inter["peak_activations"])))
        rc, out, err, cmd = run_plan(["--schedule", "hanayo", "--ranks", P, "--micro-batches", M,
                                      "--waves", W] + costs)
        if t.check(rc == 0, cmd + ": " + err.strip()):
            print("resim: %s: %.2f at %d activations; interleaved v=%d %.2f; hanayo's own "
                  "order %.2f" % (name, makespan, max(peaks), 2 * W, inter["makespan"],
                                  json.loads(out)["makespan"]))



def stash_slots(acts, P, split):
    """Per rank, the in-flight peaks of its stages added up: the stash
    slots the runtime sizes, which schedule.max_activations bounds."""
    out = []
    for row in acts:
        live, peak = {}, {}
        for op, m, st in row:
            if op == "F":
                live[st] = live.get(st, 0) + 1
                peak[st] = max(peak.get(st, 0), live[st])
            elif op == ("W" if split else "B"):
                live[st] -= 1
        out.append(sum(peak.values()))
    return out


# The grid (RESIM_FULL=1): P = 2, 4, 8, M = 2P, 4P, 8P, 16P and
# 512, 1024 at P = 8, c = 0, 0.01, 0.025, 0.05, 0.2, 0.5 (0 and 0.2 past
# 16P); several minutes. Without it (make test) a corner of it: M = 2P
# and 4P, c = 0 and 0.2.
FULL = os.environ.get("RESIM_FULL", "0") != "0"


def grid_ms(P):
    if FULL:
        return [2 * P, 4 * P, 8 * P, 16 * P] + ([512, 1024] if P == 8 else [])
    return [2 * P, 4 * P]


def grid_cs(M, P):
    if not FULL:
        return (0.0, 0.2)
    return (0.0, 0.01, 0.025, 0.05, 0.2, 0.5) if M <= 16 * P else (0.0, 0.2)


def cap_checks(t):
    """schedule.max_activations: hanayo W = 1 split, P = 2, 4, 8, M = 2P..16P
    (and 512, 1024 at P = 8), c = 0..0.5 a rank share, caps 2 (the
    smallest), P and 2P + 1 (DualPipeV's peak): the plan re-simulates, its
    peak stays within the cap, and its cap bound is a bound."""
    for P in (2, 4, 8):
        for M in grid_ms(P):
            for c in grid_cs(M, P):
                for cap in sorted({2, P, 2 * P + 1}):
                    # a rank share f = 1, b = 2 over its two stages
                    args = plan_args("hanayo", P, M, 1, 1, 0.5, 1.0, c, 0.5)
                    rc, out, err, cmd = run_plan(args + ["--max-activations", cap])
                    cmd += " --max-activations %d" % cap
                    if not t.check(rc == 0, "%s: exit %d: %s" % (cmd, rc, err.strip())):
                        continue
                    plan = json.loads(out)
                    r = check_plan(t, plan, "hanayo", P, M, 1, 1, 0.5, 0.5, c, cmd, True, 0.5)
                    if r is None:
                        continue
                    t.check(plan["max_activations"] == cap and r["peak"] <= cap,
                            "%s: peak %d, cap %d" % (cmd, r["peak"], cap))
                    t.check(plan["cap_bound_makespan"] <= r["makespan"] + TOL * r["makespan"],
                            "%s: cap bound %r above the makespan %r"
                            % (cmd, plan["cap_bound_makespan"], r["makespan"]))


# ---- The peers: published orders of the V placement, written here from
# their descriptions (independently of lib/schedule.c's), re-simulated
# beside hanayo's capped choice at their own memory.

def v_stages(P, r):
    return r, 2 * P - 1 - r

def zbv(P, M):
    """ZB-V (Qi et al. 2024, section 6), counting in one chunk's micro-batches."""
    n = max(M, 2 * P - 1)
    out = []
    for r in range(P):
        st = v_stages(P, r)
        cnt = {"F": [0, 0], "B": [0, 0], "W": [0, 0]}
        lst = []
        def push(op, ch):
            m = cnt[op][ch]; cnt[op][ch] += 1
            if m < M: lst.append((op, m, st[ch]))
        for _ in range(2 * (P - r) - 1): push("F", 0)
        for _ in range(r): push("F", 1); push("F", 0)
        for _ in range(P - r): push("F", 1); push("B", 1); push("W", 1)
        while cnt["F"][1] < cnt["F"][0] or cnt["F"][0] < n:
            if cnt["F"][0] < n: push("F", 0)
            push("B", 0); push("W", 0); push("F", 1); push("B", 1); push("W", 1)
        for _ in range(r): push("B", 0); push("B", 1)
        for _ in range(P - r): push("B", 0); push("W", 0)
        while cnt["W"][1] < cnt["B"][1]: push("W", 1)
        while cnt["W"][0] < cnt["B"][0]: push("W", 0)
        out.append(lst)
    return out

def dualpipev(P, M):
    """DualPipeV (DeepSeek's DualPipe, cut in half) in its eight steps; an
    overlapped F&B pair runs as F then B, a backward without zero bubble
    as B then its W; with it, W waits in a queue."""
    assert M >= 2 * P
    out = []
    for r in range(P):
        st = v_stages(P, r)
        nf, nb = [0, 0], [0, 0]
        lst, wq = [], []
        def F(ch):
            lst.append(("F", nf[ch], st[ch])); nf[ch] += 1
        def B(ch, zb=False):
            a = ("B", nb[ch], st[ch]); nb[ch] += 1
            lst.append(a)
            if zb: wq.append(("W", a[1], a[2]))
            else: lst.append(("W", a[1], a[2]))
        def W():
            lst.append(wq.pop(0))
        for _ in range((P - r - 1) * 2): F(0)
        for _ in range(r + 1): F(0); F(1)
        for _ in range(P - r - 1): B(1, True); W(); F(1)
        for _ in range(M - 2 * P + r + 1):
            F(0); B(1); F(1); B(0)
        for _ in range(P - r - 1):
            B(1); F(1); B(0)
        s6 = r + 1
        zb = False
        for i in range(s6):
            if i == s6 // 2 and r % 2 == 1: zb = True
            B(1, zb)
            if i == s6 // 2 and r % 2 == 0: zb = True
            B(0, zb)
        for _ in range(P - r - 1): W(); B(0, True)
        for _ in range(r + 1): W()
        assert not wq
        out.append(lst)
    return out

def vpattern(P, M, kind):
    """V-Min / V-Half (Qi et al., Pipeline Parallelism with Controllable
    Memory): rank i's F of chunk 0, F of chunk 1, B of chunk 1, B of chunk
    0 at fixed offsets in a repeating block of 6 slots per micro-batch; W's
    in the free slots, oldest first."""
    out = []
    for i in range(P):
        if kind == "min":
            g = 2 if P % 3 == 0 else 0
            off = [i, 2 * P - i - 1, 2 * P + g + i, 4 * P + g - i - 1]
        else:
            g = 3 if P % 2 == 0 else 0
            off = [2 * i, 3 * P - i - 2, 3 * P + g + 2 * i - 1, 6 * P + g - i - 2]
        st = v_stages(P, i)
        slot = {}
        for m in range(M):
            for k, (op, ch) in enumerate([("F", 0), ("F", 1), ("B", 1), ("B", 0)]):
                t = off[k] + 6 * m
                assert t not in slot
                slot[t] = (op, m, st[ch])
        lst, wq = [], []
        t, end = 0, max(slot)
        while t <= end or wq:
            if t in slot:
                a = slot[t]
                lst.append(a)
                if a[0] == "B": wq.append(("W", a[1], a[2]))
            elif wq:
                lst.append(wq.pop(0))
            t += 1
        out.append(lst)
    return out


def interleaved_zb(P, M, v):
    """PyTorch's interleaved zero-bubble order (ScheduleInterleavedZeroBubble:
    the ZB-H1 rule of Qi et al., "Zero Bubble Pipeline Parallelism", on
    Megatron's interleaved placement, stage k*P + r on rank r), from its
    description. The micro-batches go in rounds of `per` = M / max(1, M div
    P); each rank visits its chunks in turn, `per` micro-batches at a time,
    forwards shallowest first and input-gradient passes (B) deepest first.
    Rank r starts with (v - 1) * per + P - 1 - r forwards (one fewer than
    the rank before it: the first backward comes back to it one step
    later), then runs one F and one B per step until its forwards are
    done, then its remaining B's; from its (r + 1)-th B on, each B is
    followed by the oldest weight pass (W) it still owes, and the W's left
    over end its list."""
    rounds = max(1, M // P)
    assert M % rounds == 0, "interleaved zero bubble: M a multiple of its rounds"
    per, n = M // rounds, v * M
    out = []
    for r in range(P):
        warm = min((v - 1) * per + P - 1 - r, n)
        count = {}

        def next_of(op, chunk):
            s = chunk * P + r
            m = count.get((op, s), 0)
            count[(op, s)] = m + 1
            return (op, m, s)
        lst, owed = [], []
        for step in range(n + warm):
            if step < n:
                lst.append(next_of("F", (step // per) % v))
            if step >= warm:
                k = step - warm
                b = next_of("B", v - 1 - (k // per) % v)
                lst.append(b)
                owed.append(("W", b[1], b[2]))
                if k >= r:
                    lst.append(owed.pop(0))
        out.append(lst + owed)
    return out


def price_order(acts, P, S, c):
    """Makespan, peak activations and stash slots of a split order over S
    stages, a rank share costing f = 1, B = W = 1 (a stage P/S of it),
    transfers c."""
    f = P / S
    sim = simulate(acts, S, f, f, c, f)
    if sim is None:
        return None
    return sim[2], max(peak_activations(acts, True)), max(stash_slots(acts, len(acts), True))


def hanayo_capped(t, P, M, W, c, cap, bound=None):
    """hanayo W split at cap, re-simulated: its makespan, or None; the
    plan's bound within the cap goes to bound[0] when a list is given."""
    f = 1.0 / (2 * W)
    args = plan_args("hanayo", P, M, W, 1, f, 2 * f, c, f) + ["--max-activations", cap]
    rc, out, err, cmd = run_plan(args)
    cmd += " --max-activations %d" % cap
    if not t.check(rc == 0, "%s: exit %d: %s" % (cmd, rc, err.strip())):
        return None
    plan = json.loads(out)
    r = check_plan(t, plan, "hanayo", P, M, W, 1, f, f, c, cmd, True, f)
    if bound is not None:
        bound[:] = [plan["cap_bound_makespan"]]
    return None if r is None else r["makespan"]


def peer_checks(t):
    """At each peer's own peak hanayo W = 1 split is at or below it
    (asserted); W = 2 at the same bytes (twice the stage activations: a
    W = 2 stage is half a W = 1 one) is printed where it is not below."""
    misses = []
    table = []
    for P in (2, 4, 8):
        for M in grid_ms(P):
            cs = grid_cs(M, P)
            peers = [("ZB-V", zbv(P, M)), ("DualPipeV", dualpipev(P, M)),
                     ("V-Half", vpattern(P, M, "half")), ("V-Min", vpattern(P, M, "min"))]
            for c in cs:
                for name, acts in peers:
                    got = price_order(acts, P, 2 * P, c)
                    if not t.check(got is not None, "%s P=%d M=%d: deadlocks" % (name, P, M)):
                        continue
                    mk, pk, sl = got
                    h = hanayo_capped(t, P, M, 1, c, pk)
                    if h is None:
                        continue
                    t.check(h <= mk + TOL * mk, "%s P=%d M=%d c=%g: hanayo W=1 at its peak %d "
                            "%.4f, it %.4f" % (name, P, M, c, pk, h, mk))
                    w2 = None
                    if name in ("ZB-V", "DualPipeV") and M <= 16 * P:
                        b2 = []
                        w2 = hanayo_capped(t, P, M, 2, c, 2 * pk, b2)
                        if w2 is not None and w2 >= mk - TOL * mk:
                            misses.append("%s P=%d M=%d c=%g: W=2 at %d (its bytes) %.2f, it %.2f; "
                                          "no W=2 order within %d ends before %.2f"
                                          % (name, P, M, c, 2 * pk, w2, mk, 2 * pk, b2[0]))
                    if P == 8 and M == 32:
                        table.append((c, name, mk, pk, sl, h, w2))
    print("resim: peers at P=8, M=32 (c, peer, makespan, peak, stash slots | hanayo W=1 "
          "at its peak, W=2 at twice it):")
    for c, name, mk, pk, sl, h, w2 in table:
        print("resim:   c=%-5g %-9s %8.2f %3d %3d | %8.2f %8s" % (
            c, name, mk, pk, sl, h, "%.2f" % w2 if w2 is not None else "-"))
    print("resim: %d points where a goal is not reached:" % len(misses))
    for m in misses:
        print("resim:   " + m)


def izb_fixture_checks(t):
    """interleaved_zb equals PyTorch's own lists, action for action, in
    tests/fixtures/interleaved-zb-torch.json (made once with torch by
    gen_interleaved_zb.py beside it)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    with open(os.path.join(here, "interleaved-zb-torch.json")) as f:
        cases = json.load(f)["cases"]
    t.check(len(cases) >= 8, "interleaved-zb-torch.json: %d cases" % len(cases))
    for case in cases:
        P, M, v = case["ranks"], case["micro_batches"], case["chunks"]
        theirs = [[tuple(a) for a in lst] for lst in case["actions"]]
        ours = interleaved_zb(P, M, v)
        t.check(ours == theirs, "interleaved zero bubble P=%d M=%d v=%d: not PyTorch's "
                "order (first rank that differs: %s)" % (P, M, v, next(
                    (r for r in range(P) if r >= len(theirs) or ours[r] != theirs[r]), None)))


def izb_checks(t):
    """PyTorch's interleaved zero bubble (v = 4 as issue 26 measured it,
    and v = 2) over the peers' grid: the order is complete, each action on
    the rank of its stage (s mod P), it runs, and it holds v*P
    activations on its busiest rank. At that peak hanayo split is at or
    below it (asserted): W = 2 (four stages a rank, like v = 4) and W = 1
    (two, like v = 2). Returns the P = 8, M = 32 rows of the table."""
    table = []
    for v, W in ((4, 2), (2, 1)):
        for P in (2, 4, 8):
            for M in grid_ms(P):
                name = "interleaved ZB v=%d P=%d M=%d" % (v, P, M)
                acts = interleaved_zb(P, M, v)
                S = v * P
                want = {(op, m, s) for op in "FBW" for m in range(M) for s in range(S)}
                got = [a for lst in acts for a in lst]
                t.check(len(got) == len(want) and set(got) == want,
                        name + ": every F, B and W exactly once")
                t.check(all(a[2] % P == r for r, lst in enumerate(acts) for a in lst),
                        name + ": each action on the rank holding its stage")
                for c in grid_cs(M, P):
                    priced = price_order(acts, P, S, c)
                    if not t.check(priced is not None, name + ": deadlocks"):
                        break
                    mk, pk, sl = priced
                    t.check(pk == v * P, name + ": peak %d, not %d" % (pk, v * P))
                    b = []
                    h = hanayo_capped(t, P, M, W, c, pk, b)
                    if h is None:
                        continue
                    t.check(h <= mk + TOL * mk, "%s c=%g: hanayo W=%d at its peak %d %.4f, "
                            "it %.4f (no wave order within %d ends before %.4f)"
                            % (name, c, W, pk, h, mk, pk, b[0]))
                    if P == 8 and M == 32:
                        table.append((c, "IZB v=%d" % v, mk, pk, sl, h, W))
    return table


def unsplit_report(t):
    """Unsplit hanayo W (no cap) against interleaved v = 2W at P = 8, c
    from 0.01 to 0.5 a rank share, M up to 1024, both re-simulated: W = 1
    at or below interleaved v = 2 within its memory (asserted); for W = 2
    the points where hanayo is behind, or holds more, are printed (the
    goal of issue 26 not yet reached), with hanayo's bound at
    interleaved's memory."""
    misses = []
    P = 8
    for W in (1, 2):
        v = 2 * W
        f, b = 1.0 / v, 2.0 / v
        for M in (16, 32, 64, 128, 256, 512, 1024):
            for c in (0.01, 0.025, 0.05, 0.2, 0.5):
                rc, out, err, cmd = run_plan(plan_args("interleaved", P, M, 1, v, f, b, c))
                if not t.check(rc == 0, "%s: exit %d: %s" % (cmd, rc, err.strip())):
                    continue
                ri = check_plan(t, json.loads(out), "interleaved", P, M, 1, v, f, b, c, cmd)
                rc, out, err, cmd = run_plan(plan_args("hanayo", P, M, W, 1, f, b, c))
                if not t.check(rc == 0, "%s: exit %d: %s" % (cmd, rc, err.strip())):
                    continue
                plan = json.loads(out)
                rh = check_plan(t, plan, "hanayo", P, M, W, 1, f, b, c, cmd)
                if ri is None or rh is None:
                    continue
                behind = rh["makespan"] > ri["makespan"] + TOL * ri["makespan"] or rh["peak"] > ri["peak"]
                if W == 1:   # every candidate justified: level or ahead everywhere
                    t.check(not behind, "W=1 M=%d c=%g: hanayo %.2f at %d, interleaved v=2 %.2f at %d"
                            % (M, c, rh["makespan"], rh["peak"], ri["makespan"], ri["peak"]))
                elif behind:
                    mb = memory_bound(plan["placement"], P, M, 2 * W * P, f, b, 0.0, c, False,
                                      ri["peak"])
                    # what one activation more than interleaved's buys
                    more = ri["peak"] + 1
                    rc, out, err, cmd = run_plan(plan_args("hanayo", P, M, W, 1, f, b, c) +
                                                 ["--max-activations", more])
                    if not t.check(rc == 0, "%s: exit %d: %s" % (cmd, rc, err.strip())):
                        continue
                    rm = check_plan(t, json.loads(out), "hanayo", P, M, W, 1, f, b, c, cmd)
                    misses.append("W=%d M=%d c=%g: hanayo %.2f at %d, interleaved v=%d %.2f at %d "
                                  "(%+.2f%%); no wave order within %d ends before %.2f; within "
                                  "%d: %s" % (W, M, c, rh["makespan"], rh["peak"], v,
                                              ri["makespan"], ri["peak"],
                                              100 * (rh["makespan"] / ri["makespan"] - 1),
                                              ri["peak"], mb, more,
                                              "%.2f" % rm["makespan"] if rm else "-"))
    print("resim: unsplit at P=8, %d points where hanayo is behind interleaved v=2W or holds "
          "more:" % len(misses))
    for m in misses:
        print("resim:   " + m)

def main():
    if not os.access(HANAYO, os.X_OK):
        print("resim: %s is not an executable; build it or set HANAYO" % HANAYO,
              file=sys.stderr)
        return 2
    t = Tally()
    results = {}
    for kind, P, M, W, v in grid():
        results[(kind, P, M, W, v)] = one(t, kind, P, M, W, v)
    # Non-uniform and non-zero communication costs at a few points.
    for kind, P, M, W, v in [("gpipe", 4, 8, 1, 1), ("1f1b", 4, 8, 1, 1),
                             ("1f1b", 3, 2, 1, 1), ("interleaved", 4, 8, 1, 2),
                             ("interleaved", 2, 6, 1, 3), ("hanayo", 4, 8, 1, 1),
                             ("hanayo", 4, 8, 2, 1), ("hanayo", 3, 5, 3, 1),
                             ("hanayo", 8, 16, 2, 1)]:
        for f, b, c in [(1.0, 2.0, 0.5), (1.5, 2.5, 0.25), (1.0, 1.0, 3.0)]:
            one(t, kind, P, M, W, v, f, b, c)
    # DESIGN §1 "The schedules": hanayo's peak no higher than interleaved's at v = 2W.
    for (kind, P, M, W, v), r in results.items():
        if kind != "hanayo" or r is None or W > 2:
            continue
        other = results.get(("interleaved", P, M, 1, 2 * W))
        if other is not None:
            t.check(r["peak"] <= other["peak"],
                    "hanayo P=%d M=%d W=%d: peak %d above interleaved v=%d's %d"
                    % (P, M, W, r["peak"], 2 * W, other["peak"]))
    split_checks(t)
    transfer_grid_checks(t)
    witness_checks(t)
    sanitized = os.environ.get("HY_SANITIZE", "") != ""
    if os.environ.get("RESIM_CAPS", "0" if sanitized else "1") == "0":
        print("resim: the capped orders, peers and interleaved zero bubble not checked "
              "(RESIM_CAPS=0%s)" % (", a sanitizer build" if sanitized else ""))
    else:
        cap_checks(t)
        peer_checks(t)
        izb_fixture_checks(t)
        izb = izb_checks(t)
        print("resim: PyTorch's interleaved zero bubble at P=8, M=32 (c, order, makespan, "
              "peak, stash slots | hanayo W at its peak):")
        for c, name, mk, pk, sl, h, W in izb:
            print("resim:   c=%-5g %-9s %8.2f %3d %3d | W=%d %8.2f" % (c, name, mk, pk, sl, W, h))
        if FULL:
            unsplit_report(t)
    gaps = [(r["bubble"] - r["ideal"], k) for k, r in results.items()
            if k[0] == "hanayo" and r is not None]
    if gaps:
        at_ideal = sum(1 for g, _ in gaps if g <= TOL)
        worst = max(gaps)
        print("resim: hanayo at its ideal bubble in %d of %d points; largest "
              "gap %.4f at P=%d M=%d W=%d" % (at_ideal, len(gaps), worst[0],
                                             worst[1][1], worst[1][2], worst[1][3]))
    print("resim: %d passed, %d failed" % (t.passed, t.failed))
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
