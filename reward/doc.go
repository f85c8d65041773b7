// Package reward owns the training signal: diff extraction from a completion,
// strict unified-diff validation, apply checks, test-log parsers, FAIL_TO_PASS
// and PASS_TO_PASS grading, reward composition and reward-hacking flags. It asks
// package sandbox to run tests and never starts containers itself.
package reward
