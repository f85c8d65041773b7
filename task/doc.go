// Package task owns the tasks swetui trains on: the SWE-bench instance type,
// the per-repository spec table, dataset loaders (JSONL, JSON, parquet) and the
// embedded, deterministically generated task suite.
package task
