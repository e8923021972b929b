"""The graph-walk task: walk a small directed graph from a start node to a goal node.

A problem is a random directed graph on ``N`` nodes (``N`` in ``[n_min, n_max]``, at most
10), every node with 1 to ``degree_max`` out-edges, a start and a goal node (the goal is
reachable from the start). Nodes are the digits ``0..N-1``; in the prompt an edge
``u -> v`` is the single token ``<letter u><v>`` (``A`` = 0, ``B`` = 1, ...), edges sorted,
then ``>`` goal ``?`` start::

    prompt   <bos> A1 A2 B0 C1 C3 D0 >3?0     edges 0->1 0->2 1->0 2->1 2->3 3->0, goal 3, start 0
    response 1023<eos>                        the nodes visited after the start, ending at the goal

A correct response is any walk along edges that ends at its first arrival at the goal,
then EOS; its length (hops + 1 tokens) depends on the sampled choices. The supervised
warm start shows *random* walks (uniform out-edge at every node, :func:`random_walk`), so
the warm-started policy searches: a sample that takes a detour through a cycle is several
times longer than one that finds the goal at once, and the same prompt's samples spread
(docs/real_task.md has the measured distribution). Each hop is a lookup (the out-edges of
the current node: the prompt tokens whose letter names it) that the tiny model gets wrong
now and then, so long walks fail more often than short ones and prompts whose goal is
far or behind a cycle are hard. Reward: 1 for a correct walk, else 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from rolloutlab.real.tasks.tokenizer import BOS_ID, EOS_ID, PROMPT_TAGS, encode

DIGIT_IDS = frozenset(encode("0123456789"))
"""Token ids of the digits ``0..9`` (the node names of a response)."""
MAX_NODES = 10
"""Nodes are named by one digit."""


@dataclass(frozen=True)
class WalkConfig:
    """How graph-walk problems are drawn and solved in the warm-start data."""

    n_min: int = 3
    """Fewest nodes."""
    n_max: int = 10
    """Most nodes (at most :data:`MAX_NODES`)."""
    degree_max: int = 3
    """Most out-edges of a node (each node draws 1..degree_max, capped at ``N - 1``)."""
    sft_max_hops: int = 40
    """Longest random walk shown in the warm-start data (a longer one is redrawn, at most
    32 times, then the shortest path is shown)."""

    def __post_init__(self) -> None:
        if not (2 <= self.n_min <= self.n_max <= MAX_NODES):
            raise ValueError(
                f"WalkConfig: need 2 <= n_min <= n_max <= {MAX_NODES}, got "
                f"n_min={self.n_min}, n_max={self.n_max}"
            )
        if self.degree_max < 1 or self.sft_max_hops < 1:
            raise ValueError(
                f"WalkConfig: degree_max and sft_max_hops must be >= 1, got "
                f"{self.degree_max}, {self.sft_max_hops}"
            )


@dataclass(frozen=True)
class WalkProblem:
    """One problem: out-edges per node, start and goal."""

    adj: tuple[tuple[int, ...], ...]
    """``adj[u]``: sorted out-neighbours of node ``u``."""
    start: int
    goal: int

    @property
    def prompt_text(self) -> str:
        """E.g. ``"A1A2B0C1>1?0"``: one token per edge, then ``>`` goal ``?`` start."""
        edges = "".join(f"{PROMPT_TAGS[u]}{v}" for u, vs in enumerate(self.adj) for v in vs)
        return f"{edges}>{self.goal}?{self.start}"

    @property
    def prompt_ids(self) -> list[int]:
        """``[BOS] + encode(prompt_text)``."""
        return [BOS_ID] + encode(self.prompt_text)

    def shortest_path(self) -> list[int]:
        """Nodes after the start on a shortest path to the goal (breadth-first search)."""
        prev = {self.start: -1}
        todo = deque([self.start])
        while todo:
            u = todo.popleft()
            for v in self.adj[u]:
                if v not in prev:
                    prev[v] = u
                    todo.append(v)
        path, u = [], self.goal
        while u != self.start:
            path.append(u)
            u = prev[u]
        return path[::-1]


def _reachable(adj: tuple[tuple[int, ...], ...], start: int) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        for v in adj[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return seen


def draw_problem(rng: np.random.Generator, cfg: WalkConfig) -> WalkProblem:
    """One problem: ``N`` uniform in ``[n_min, n_max]``, each node's out-degree uniform in
    ``[1, min(degree_max, N - 1)]`` with distinct targets other than itself, start and
    goal distinct; redrawn until the goal is reachable from the start."""
    while True:
        n = int(rng.integers(cfg.n_min, cfg.n_max + 1))
        adj = []
        for u in range(n):
            d = int(rng.integers(1, min(cfg.degree_max, n - 1) + 1))
            others = [v for v in range(n) if v != u]
            adj.append(tuple(sorted(int(v) for v in rng.choice(others, d, replace=False))))
        start, goal = (int(x) for x in rng.choice(n, 2, replace=False))
        adj_t = tuple(adj)
        if goal in _reachable(adj_t, start):
            return WalkProblem(adj_t, start, goal)


def sample_walk_problems(
    rng: np.random.Generator, cfg: WalkConfig, size: int, exclude: frozenset[str] = frozenset()
) -> list[WalkProblem]:
    """``size`` problems; any whose prompt is in ``exclude`` (held-out set) is redrawn."""
    out: list[WalkProblem] = []
    while len(out) < size:
        p = draw_problem(rng, cfg)
        if p.prompt_text not in exclude:
            out.append(p)
    return out


def heldout_walk_problems(cfg: WalkConfig, size: int, seed: int = 10_000) -> list[WalkProblem]:
    """The fixed held-out evaluation set (its own seed, independent of the run's)."""
    return sample_walk_problems(np.random.default_rng(seed), cfg, size)


def random_walk(problem: WalkProblem, rng: np.random.Generator, max_hops: int) -> list[int] | None:
    """Nodes after the start of a uniform random walk that stops at the goal, or None
    if it has not arrived within ``max_hops`` hops."""
    u, path = problem.start, []
    for _ in range(max_hops):
        nbrs = problem.adj[u]
        u = nbrs[int(rng.integers(len(nbrs)))]
        path.append(u)
        if u == problem.goal:
            return path
    return None


def solution_ids(problem: WalkProblem, rng: np.random.Generator, cfg: WalkConfig) -> list[int]:
    """A warm-start solution (EOS included): a random walk of at most ``cfg.sft_max_hops``
    hops (up to 32 tries), else the shortest path. Always correct (:func:`is_correct`)."""
    for _ in range(32):
        path = random_walk(problem, rng, cfg.sft_max_hops)
        if path is not None:
            break
    else:
        path = problem.shortest_path()
    return encode("".join(str(v) for v in path)) + [EOS_ID]


def walk_of(response_ids: list[int]) -> list[int] | None:
    """The visited nodes of a response (digits then one EOS), or None if malformed."""
    if len(response_ids) < 2 or response_ids[-1] != EOS_ID:
        return None
    body = response_ids[:-1]
    if any(i not in DIGIT_IDS for i in body):
        return None
    digit_of = {i: d for d, i in enumerate(encode("0123456789"))}
    return [digit_of[i] for i in body]


def is_correct(problem: WalkProblem, response_ids: list[int]) -> bool:
    """Every hop follows an out-edge, the walk ends at the goal, and reaches it only there."""
    path = walk_of(response_ids)
    if path is None or path[-1] != problem.goal or problem.goal in path[:-1]:
        return False
    u = problem.start
    for v in path:
        if u >= len(problem.adj) or v not in problem.adj[u]:
            return False
        u = v
    return True


def walk_reward(problem: WalkProblem, response_ids: list[int]) -> float:
    """``1[correct]`` (the DAPO overlong term is added by the learner)."""
    return float(is_correct(problem, response_ids))
