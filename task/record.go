package task

import (
	"bytes"

	"github.com/swetui/swetui/config"
)

// DecodeInstance reads one instance given as a JSON object (a dataset
// file's record: the same field aliases, test lists as lists or JSON-encoded
// strings, unknown keys ignored), validates it and fills its execution
// fields and split as Load does for the instances of a dataset file. The
// reward server reads the instances of its requests with it.
func DecodeInstance(data []byte, cfg config.Config) (Instance, error) {
	in, err := decodeRecord(bytes.TrimPrefix(data, BOM))
	if err != nil {
		return Instance{}, err
	}
	if err := in.Validate(); err != nil {
		return Instance{}, err
	}
	if in.Split == "" {
		in.Split = SplitTrain
		if IsTest(in.InstanceID, cfg.Data.TestFrac) {
			in.Split = SplitTest
		}
	}
	in.ApplySpec()
	in.applyImageDefault(cfg.Prepare)
	return in, nil
}
