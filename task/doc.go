// Package task owns the tasks swetui trains on: the SWE-bench instance type,
// the per-repository spec table, dataset loaders (JSONL, JSON, parquet) and the
// embedded, deterministically generated task suite.
//
// Instances: Instance carries SWE-bench's fields plus optional execution
// fields (image, workdir, test_cmd, test_directives, log_parser, eval_script,
// setup, split). ApplySpec fills the execution fields an instance lacks from
// the spec table, which follows the official harness (swebench/harness
// constants: test commands per repository and version, log parser names as
// package reward registers them, test directives from the test patch).
//
// Loading: Load(ctx, cfg) reads data.source, either "mini" or a .jsonl, .json
// (array or JSON lines) or .parquet file, one record at a time, validates each
// record, rejects duplicate instance ids, and keeps only what data.split,
// data.include, data.exclude and data.train_limit select. Errors name the
// file, the line (or row) and the field. A record without a "split" field
// is put in the test split when IsTest(instance_id, data.test_fraction).
//
// The embedded suite ("mini"): GenerateMini builds data.mini_tasks small
// Python packages from data.mini_seed, each with one bug planted in a
// function drawn from a library of templates (bug families: comparison,
// off-by-one, wrong constant, swapped arguments, missing None/empty check,
// wrong return value, formatting, boolean operator, normalisation, lost
// update, wrong operator, missing case). A Go model of every template tells
// which inputs expose the bug (FAIL_TO_PASS tests, added by the test patch)
// and which do not (PASS_TO_PASS tests, already in the repository). Each
// repository is a git repository written directly by Go with a fixed
// identity and date, so base_commit hashes are the same everywhere. Tests run
// with MiniTestCmd (pytest -rA, node ids tests/test_<module>.py::test_<name>)
// and the "pytest" log parser, in the image sandbox.image, where the
// repository of instance I sits at /repos/I. MiniBuildContext writes that
// image's Docker build context (FROM MiniBaseImage); MaterializeMini writes
// the repositories on the host, cached by the suite's Digest.
package task
