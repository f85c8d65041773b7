package sgemm

import (
	"os"
	"strconv"
)

func init() {
	if v, err := strconv.Atoi(os.Getenv("SGEMM_PACKB")); err == nil {
		packBMinRows = v
	}
	if v, err := strconv.Atoi(os.Getenv("SGEMM_PACKA")); err == nil {
		packAMinCols = v
	}
}
