package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// stringFields maps a record's keys to the instance's string fields.
// Aliases cover the SWE-bench-like exports swetui reads (SWE-smith's
// image_name, R2E-Gym's docker_image).
func stringFields(in *Instance) map[string]*string {
	return map[string]*string{
		"instance_id":              &in.InstanceID,
		"repo":                     &in.Repo,
		"base_commit":              &in.BaseCommit,
		"problem_statement":        &in.ProblemStatement,
		"hints_text":               &in.HintsText,
		"patch":                    &in.Patch,
		"test_patch":               &in.TestPatch,
		"version":                  &in.Version,
		"environment_setup_commit": &in.EnvironmentSetupCommit,
		"created_at":               &in.CreatedAt,
		"text":                     &in.Text,
		"image":                    &in.Image,
		"image_name":               &in.Image,
		"docker_image":             &in.Image,
		"workdir":                  &in.Workdir,
		"test_cmd":                 &in.TestCmd,
		"log_parser":               &in.LogParser,
		"eval_script":              &in.EvalScript,
		"setup":                    &in.Setup,
		"repo_setup":               &in.RepoSetup,
		"split":                    &in.Split,
	}
}

func listFields(in *Instance) map[string]*TestList {
	return map[string]*TestList{
		"FAIL_TO_PASS":    &in.FailToPass,
		"PASS_TO_PASS":    &in.PassToPass,
		"test_directives": (*TestList)(&in.TestDirectives),
	}
}

// decodeRecord turns one JSON object into an instance, naming the field
// whose value has the wrong type. Unknown keys are ignored: datasets carry
// extra columns (difficulty, created_by, ...).
func decodeRecord(data []byte) (Instance, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Instance{}, fmt.Errorf("not a JSON object: %w", err)
	}
	return decodeFields(raw)
}

func decodeFields(raw map[string]json.RawMessage) (Instance, error) {
	var in Instance
	strs, lists := stringFields(&in), listFields(&in)
	// Sorted keys so that the first bad field reported is stable.
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		if p, ok := strs[k]; ok {
			if err := decodeString(k, v, p); err != nil {
				return Instance{}, err
			}
		} else if p, ok := lists[k]; ok {
			if err := json.Unmarshal(v, p); err != nil {
				return Instance{}, fmt.Errorf("field %q: %w", k, err)
			}
		}
	}
	return in, nil
}

func decodeString(key string, v json.RawMessage, p *string) error {
	if err := json.Unmarshal(v, p); err == nil {
		return nil
	}
	// A version written as a number (0.12) keeps its text.
	if key == "version" {
		var n json.Number
		if err := json.Unmarshal(v, &n); err == nil {
			*p = n.String()
			return nil
		}
	}
	return fmt.Errorf("field %q: want a string, got %.40s", key, v)
}
