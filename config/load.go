package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Load resolves a configuration: the defaults, then the TOML document data
// (named name in errors; nil means none), then the overrides in order. It does
// not validate; call Validate on the result.
func Load(name string, data []byte, overrides []string) (Config, error) {
	cfg := Default()
	if data != nil {
		if err := decodeStrict(name, data, &cfg); err != nil {
			return cfg, err
		}
	}
	for _, ov := range overrides {
		if err := ApplyOverride(&cfg, ov); err != nil {
			return cfg, err
		}
	}
	return resolve(cfg), nil
}

// resolve applies what one setting implies for another. In agent mode the
// model runs at agent.context when model.context is smaller (raising
// either one raises it), so that `rollout.mode=agent` alone has room for a
// trajectory; training starts in the docker phase: an agent's diff is
// swetui's own git diff, always well-formed and applying, so the syntax
// and apply-only phases would reward any edit at all; and a step's groups
// are agent.group_size trajectories, agent.max_groups at most, where those
// are set (a step's first groups always count).
func resolve(cfg Config) Config {
	if cfg.Rollout.Mode != RolloutAgent {
		return cfg
	}
	cfg.Model.Context = max(cfg.Model.Context, cfg.Agent.Context)
	cfg.Curriculum.Phase = PhaseDocker
	if cfg.Agent.GroupSize > 0 {
		cfg.GRPO.GroupSize = cfg.Agent.GroupSize
	}
	if cfg.Agent.MaxGroups > 0 {
		cfg.GRPO.MaxGroups = max(cfg.Agent.MaxGroups, cfg.GRPO.PromptsPerStep)
	}
	return cfg
}

// LoadFile reads path and resolves it with Load. A missing file is an error
// unless optional is true, in which case the defaults stand in for it.
func LoadFile(path string, optional bool, overrides []string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if optional && errors.Is(err, os.ErrNotExist) {
			return Load(path, nil, overrides)
		}
		return Default(), fmt.Errorf("read config: %w", err)
	}
	return Load(path, data, overrides)
}

func decodeStrict(name string, data []byte, cfg *Config) error {
	// A UTF-8 byte-order mark (Windows editors write one) is no TOML key.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(cfg)
	if err == nil {
		return nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		msgs := make([]string, 0, len(strict.Errors))
		for _, e := range strict.Errors {
			row, _ := e.Position()
			msgs = append(msgs, fmt.Sprintf("%s:%d: unknown key %q", name, row, strings.Join(e.Key(), ".")))
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		if key := strings.Join(de.Key(), "."); key != "" {
			return fmt.Errorf("%s:%d: key %q: %s", name, row, key, de.Error())
		}
		return fmt.Errorf("%s:%d: %s", name, row, de.Error())
	}
	return fmt.Errorf("%s: %w", name, err)
}

// ApplyOverride sets one key.path=value on cfg. The value is read as a TOML
// value (number, boolean, string, array); text that is not valid TOML is taken
// as a bare string, so curriculum.phase=apply-only needs no quotes.
func ApplyOverride(cfg *Config, override string) error {
	key, raw, ok := strings.Cut(override, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("override %q: want key.path=value", override)
	}
	field, err := fieldByPath(reflect.ValueOf(cfg).Elem(), key)
	if err != nil {
		return err
	}
	value := parseValue(raw)
	if err := assign(field, value, raw); err != nil {
		return fmt.Errorf("override %s=%s: %w", key, raw, err)
	}
	return nil
}

func parseValue(raw string) any {
	var doc struct {
		V any `toml:"v"`
	}
	if err := toml.Unmarshal([]byte("v = "+raw), &doc); err != nil || doc.V == nil {
		return raw
	}
	return doc.V
}

// fieldByPath walks the toml tags of v along the dotted path.
func fieldByPath(v reflect.Value, path string) (reflect.Value, error) {
	parts := strings.Split(path, ".")
	for i, part := range parts {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("unknown key %q: %q is not a table", path, strings.Join(parts[:i], "."))
		}
		next, ok := fieldByTag(v, part)
		if !ok {
			return reflect.Value{}, fmt.Errorf("unknown key %q (known in %s: %s)", path,
				tableName(parts[:i]), strings.Join(tagNames(v.Type()), ", "))
		}
		v = next
	}
	if v.Kind() == reflect.Struct {
		return reflect.Value{}, fmt.Errorf("key %q is a table; set one of its keys: %s", path,
			strings.Join(tagNames(v.Type()), ", "))
	}
	return v, nil
}

func tableName(parts []string) string {
	if len(parts) == 0 {
		return "the top level"
	}
	return "[" + strings.Join(parts, ".") + "]"
}

func fieldByTag(v reflect.Value, tag string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if tomlName(t.Field(i)) == tag {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}

func tagNames(t reflect.Type) []string {
	names := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		names = append(names, tomlName(t.Field(i)))
	}
	return names
}

func assign(field reflect.Value, value any, raw string) error {
	switch field.Kind() {
	case reflect.String:
		if s, ok := value.(string); ok {
			field.SetString(s)
		} else {
			field.SetString(strings.TrimSpace(raw))
		}
	case reflect.Bool:
		b, ok := value.(bool)
		if !ok {
			return fmt.Errorf("want a boolean (true or false), got %s", describe(value))
		}
		field.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, ok := value.(int64)
		if !ok {
			return fmt.Errorf("want an integer, got %s", describe(value))
		}
		field.SetInt(n)
	case reflect.Float64:
		switch n := value.(type) {
		case int64:
			field.SetFloat(float64(n))
		case float64:
			field.SetFloat(n)
		default:
			return fmt.Errorf("want a number, got %s", describe(value))
		}
	case reflect.Slice:
		items, ok := value.([]any)
		if str, isString := value.(string); !ok && isString && field.Type().Elem().Kind() == reflect.String {
			// One string is a list of one: model.cuda_libs=build/cudaemu
			// reads as the user means it.
			items, ok = []any{str}, true
		}
		if !ok {
			return fmt.Errorf("want an array such as [\"a\", \"b\"], got %s", describe(value))
		}
		out := reflect.MakeSlice(field.Type(), 0, len(items))
		for i, item := range items {
			elem := reflect.New(field.Type().Elem()).Elem()
			if _, isString := item.(string); elem.Kind() == reflect.String && !isString {
				return fmt.Errorf("item %d: want a string, got %s", i, describe(item))
			}
			if err := assign(elem, item, fmt.Sprint(item)); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			out = reflect.Append(out, elem)
		}
		field.Set(out)
	default:
		return fmt.Errorf("cannot set a %s from the command line", field.Kind())
	}
	return nil
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
}

// Marshal renders cfg as TOML, as `swetui config` prints it.
func Marshal(cfg Config) ([]byte, error) {
	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(false)
	if err := enc.Encode(cfg); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return buf.Bytes(), nil
}
