"""Mutants of the CUDA host paths (docs/GPU.md: outputs copied back to the host once, kept by the caller) and of
the doc generators that keep README.md's figures honest (docs/DEVELOPING.md)."""

from __future__ import annotations

from tests.mutants import Mutant

NUMBERS = "tests/test_readme_numbers.py::"

PATHS = [
    Mutant("pinned-outputs-share-a-buffer",
           "GPU: each output of a stage is copied back into its own host buffer (two float outputs share none)",
           "pipeline/voices/binding.py", 'dst = pool.get(f"out:{name}", shape, np.float32)',
           'dst = pool.get("out:float", shape, np.float32)',
           ("tests/test_binding.py::test_two_float_outputs_and_outputs_kept_across_calls_on_every_host_path",)),
    Mutant("stage-outputs-are-pool-views",
           "GPU: a stage's outputs are the caller's: a second call on the thread leaves them as they were",
           "pipeline/voices/runtime.py", "return [np.array(out, copy=True) for out in self._binding.run(feeds, outputs)]",
           "return list(self._binding.run(feeds, outputs))",
           ("tests/test_binding.py::test_two_float_outputs_and_outputs_kept_across_calls_on_every_host_path",)),
    Mutant("check-passes-a-stale-block",
           "DEVELOPING: a generator's --check exits 1 when the doc's block is not what it makes",
           "scripts/readme_block.py", "return 1 if diff else 0", "return 0",
           (NUMBERS + "test_the_check_exits_1_on_a_stale_block_and_0_once_it_is_rewritten",)),
    Mutant("headline-links-a-missing-doc",
           "README: every headline figure links to the section of a doc that holds its command",
           "scripts/readme_numbers.py", "        if not path.is_file():\n            return False",
           "        if not path.is_file():\n            return True",
           (NUMBERS + "test_a_row_without_a_date_or_with_a_dead_link_is_refused",)),
    Mutant("headline-row-without-a-date", "README: every headline figure is dated",
           "scripts/readme_numbers.py", "        if not DATE.match(date):", "        if False:",
           (NUMBERS + "test_a_row_without_a_date_or_with_a_dead_link_is_refused",)),
]
