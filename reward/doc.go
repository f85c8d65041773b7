// Package reward owns the training signal: diff extraction from a completion,
// strict unified-diff validation, apply checks, test-log parsers, FAIL_TO_PASS
// and PASS_TO_PASS grading, reward composition and reward-hacking flags. It asks
// package sandbox to run tests and never starts containers itself.
//
// One completion goes through, as far as its mode asks:
//
//   - Extract finds the diff (a fenced diff/patch block, <patch> tags or a bare
//     diff; the first well-formed candidate wins), normalises line endings and
//     repairs a missing final newline, and says which form it found.
//   - ValidateDiff is the strict syntax check of mode syntax: headers, hunk
//     counts, no empty hunks, new/deleted/renamed/binary files, paths that stay
//     inside the repository. The parsed Patch keeps every hunk, so the
//     hack check and the shaping terms read it instead of the text again;
//     ReadDiff reads a broken diff as far as it goes, for the hack check.
//   - Applier checks on the host whether the diff applies at base_commit with
//     the harness's fallback chain (git apply, git apply --reject, patch
//     --fuzz=5 --forward), against a bare copy and a cached index of the base
//     tree, materialising only the touched files for the fallbacks. Its
//     verdicts equal those of sandbox's eval script (tests run both).
//   - In mode docker, PoolEvaluator runs sandbox's eval script in the pool;
//     the runner's output between the last nonce marker pair, with its exit
//     status, is parsed by the harness's log parser for the repository
//     (ParserFor, names shared with task's spec table) and graded as the
//     official harness does (GradeStatuses); the 30 real harness reports
//     (internal/realdata) are reproduced exactly.
//   - HackFlags (CheckHacks, with what the eval's reset undoes) names what
//     a parsed patch did that a reward hacker would do
//     (touch tests or their settings, shadow the runner, reach into it or
//     around it, forge protocol lines): a flagged patch is never resolved
//     and, by default (reward.hack_penalty = 1), worth nothing.
//   - Between apply-only and docker, shaping terms make the reward denser
//     (shaping.go): SWE-RL's patch similarity to the gold patch
//     (PatchSimilarity of the files' changes, re-diffed where the base
//     files are known; Ratio is Python's SequenceMatcher ratio), per-hunk
//     credit for a patch that does not apply as a whole (HunksApplying) and
//     the no-op check (NoopDiff) that keeps a patch changing nothing from
//     any of it. The base files come from the Applier, read once per group;
//     without them the terms use the diffs as written.
//   - Weights.Compose turns the components into the reward; the
//     event.Verdict keeps every component, and the patch, so that a reward
//     can be explained; the trainer, rollouts.jsonl, the score report and the
//     console carry it as it is. Infrastructure failures are
//     flagged (Infra), never scored as the model's.
//
// Scorer ties these together per GRPO group (Score is the trainer's Scorer
// port as it is); `swetui score` and `swetui grade` are built on it.
package reward
