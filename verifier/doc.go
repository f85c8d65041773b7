// Package verifier owns the learned verifier's data and measures: the
// labels a run's own docker-phase verdicts give (rollouts.jsonl, both
// rollout modes), the split by task that keeps held-out tasks held out,
// the fixed question the verifier answers after a task and a candidate
// (scored by the probability of its YES token, as SWE-Gym's and R2E-Gym's
// verifiers are), and the numbers that say whether to trust it: AUC,
// calibration error with a fitted temperature, precision and recall at a
// chosen threshold, and a baseline that knows only whether the patch
// applied and how large it is. Training it is app's (the policy's own
// model and SFT loop); this package is pure data and math.
package verifier
