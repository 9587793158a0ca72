"""The mutation check: small, realistic mutations of the code, each breaking one guarantee that README.md,
docs/RELIABILITY.md or docs/SCALING.md states, each with the tests that must catch it.

``python -m tests.mutants`` applies each to a scratch copy of the tree and runs its tests there (docs/DEVELOPING.md,
"The mutation check"). A mutant is found by an exact anchor text in one file: an anchor that is not there exactly
once (the code moved) is an error of the list, never a catch, so the list is fixed when the code changes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """``anchor`` in ``path`` (relative to the repository root) replaced by ``replacement``; ``breaks``: the guarantee
    that then no longer holds, and where the docs state it; ``tests``: pytest node ids (or files) of which at least
    one must fail."""

    name: str
    breaks: str
    path: str
    anchor: str
    replacement: str
    tests: tuple[str, ...]

    def apply(self, text: str) -> str:
        """``text`` (``path``'s) mutated; ``ValueError`` when the anchor is not in it exactly once."""
        found = text.count(self.anchor)
        if found != 1:
            raise ValueError(f"{self.name}: its anchor is in {self.path} {found} times, not once (the code moved: "
                             "fix the list)")
        return text.replace(self.anchor, self.replacement)


def all_mutants() -> list[Mutant]:
    from tests.mutants.broker import BROKER
    from tests.mutants.fronts import FRONTS
    from tests.mutants.paths import PATHS

    mutants = [*BROKER, *FRONTS, *PATHS]
    names = [m.name for m in mutants]
    if len(set(names)) != len(names):
        raise ValueError("two mutants share a name")
    return mutants
