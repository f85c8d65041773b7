package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestConfigTOMLMatchesDefault(t *testing.T) {
	data, err := os.ReadFile("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load("config.toml", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Fatalf("config.toml and Default() disagree:\nfile:    %+v\ndefault: %+v", got, want)
	}
	if err := Validate(got); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// Every key in config.toml carries a comment.
	for i, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "=") && !strings.HasPrefix(strings.TrimSpace(line), "#") && !strings.Contains(line, "#") {
			t.Errorf("config.toml:%d has no comment: %s", i+1, line)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		body    string
		check   func(Config) bool
		wantErr string
	}{
		{"empty file keeps defaults", "", func(c Config) bool { return reflect.DeepEqual(c, Default()) }, ""},
		{"nested table", "[grpo.async]\nenabled = true\n", func(c Config) bool { return c.GRPO.Async.Enabled }, ""},
		{"array replaces", "[sandbox]\nhosts = [\"unix:///a\", \"tcp://b:2376\"]\n",
			func(c Config) bool { return reflect.DeepEqual(c.Sandbox.Hosts, []string{"unix:///a", "tcp://b:2376"}) }, ""},
		{"misspelt key names file, line and key", "[grpo]\ngroup_size = 4\ngruop_size = 8\n", nil, `bad.toml:3: unknown key "grpo.gruop_size"`},
		{"unknown table", "[nosuch]\nx = 1\n", nil, `unknown key "nosuch`},
		{"type mismatch names the key", "[grpo]\ngroup_size = \"many\"\n", nil, `key "grpo.group_size"`},
		{"syntax error has a line", "[grpo\n", nil, "bad.toml:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.toml")
			if err := os.WriteFile(path, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadFile(path, false, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Fatalf("unexpected config %+v", cfg)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.toml")
	if _, err := LoadFile(missing, false, nil); err == nil || !strings.Contains(err.Error(), "none.toml") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
	cfg, err := LoadFile(missing, true, []string{"run.max_steps=7"})
	if err != nil || cfg.Run.MaxSteps != 7 {
		t.Fatalf("optional missing file: %v %d", err, cfg.Run.MaxSteps)
	}
}

func TestOverrides(t *testing.T) {
	tests := []struct {
		override string
		check    func(Config) bool
		wantErr  string
	}{
		{"grpo.group_size=8", func(c Config) bool { return c.GRPO.GroupSize == 8 }, ""},
		{"grpo.async.enabled=true", func(c Config) bool { return c.GRPO.Async.Enabled }, ""},
		{"grpo.async.max_trajectory_age_steps=0", func(c Config) bool { return c.GRPO.Async.MaxTrajectoryAgeSteps == 0 }, ""},
		{"curriculum.phase=apply-only", func(c Config) bool { return c.Curriculum.Phase == "apply-only" }, ""},
		{`curriculum.phase="docker"`, func(c Config) bool { return c.Curriculum.Phase == "docker" }, ""},
		{"optim.lr=3e-4", func(c Config) bool { return c.Optim.LR == 3e-4 }, ""},
		{"optim.lr=1", func(c Config) bool { return c.Optim.LR == 1 }, ""},
		{"run.name=a=b=c", func(c Config) bool { return c.Run.Name == "a=b=c" }, ""},
		{"run.name=2024", func(c Config) bool { return c.Run.Name == "2024" }, ""},
		{`sandbox.hosts=["unix:///x.sock", "tcp://h:2376"]`,
			func(c Config) bool {
				return reflect.DeepEqual(c.Sandbox.Hosts, []string{"unix:///x.sock", "tcp://h:2376"})
			}, ""},
		{`data.include=[]`, func(c Config) bool { return len(c.Data.Include) == 0 }, ""},
		{"grpo.group_size=abc", nil, "override grpo.group_size=abc: want an integer"},
		{"grpo.group_size=2.5", nil, "grpo.group_size=2.5: want an integer"},
		{"grpo.async.enabled=yes", nil, "grpo.async.enabled=yes: want a boolean"},
		{"sandbox.hosts=unix:///x", func(c Config) bool { return reflect.DeepEqual(c.Sandbox.Hosts, []string{"unix:///x"}) }, ""},
		{"model.cuda_libs=build/cudaemu", func(c Config) bool { return reflect.DeepEqual(c.Model.CUDALibs, []string{"build/cudaemu"}) }, ""},
		{"model.device=cuda:0,1", func(c Config) bool { return c.Model.Device == "cuda:0,1" && c.Model.ShardOptimizer }, ""},
		{"model.device=cuda:all", func(c Config) bool { return c.Model.Device == "cuda:all" }, ""},
		{"sandbox.hosts=1", nil, "sandbox.hosts=1: want an array"},
		{"sandbox.hosts=[1]", nil, "item 0"},
		{"nosuch.key=1", nil, `unknown key "nosuch.key"`},
		{"grpo.nosuch=1", nil, `unknown key "grpo.nosuch" (known in [grpo]:`},
		{"grpo=1", nil, `key "grpo" is a table`},
		{"grpo.group_size.x=1", nil, `"grpo.group_size" is not a table`},
		{"noequals", nil, "want key.path=value"},
	}
	for _, tt := range tests {
		t.Run(tt.override, func(t *testing.T) {
			cfg, err := Load("", nil, []string{tt.override})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Fatalf("override not applied: %+v", cfg)
			}
		})
	}
}

func TestOverridesApplyAfterFileInOrder(t *testing.T) {
	cfg, err := Load("f.toml", []byte("[grpo]\ngroup_size = 6\n"), []string{"grpo.group_size=3", "grpo.group_size=5"})
	if err != nil || cfg.GRPO.GroupSize != 5 {
		t.Fatalf("got %d, %v; want 5", cfg.GRPO.GroupSize, err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		overrides []string
		want      []string
	}{
		{"defaults", nil, nil},
		{"group size", []string{"grpo.group_size=1"}, []string{"grpo.group_size = 1: must be at least 2"}},
		{"phase name", []string{"curriculum.phase=tests"}, []string{`curriculum.phase = "tests": must be one of syntax, apply-only, docker`}},
		{"async needs IS", []string{"grpo.async.enabled=true"}, []string{"async mode", "requires importance-sampling"}},
		{"async with IS", []string{"grpo.async.enabled=true", "grpo.is_correction=truncated"}, nil},
		{"max groups below the step's", []string{"grpo.max_groups=1"}, []string{"grpo.max_groups = 1: must be at least grpo.prompts_per_step"}},
		{"phase group size of one", []string{"grpo.group_size_by_phase.apply_only=1"}, []string{"grpo.group_size_by_phase.apply_only = 1: must be 0"}},
		{"phase group size", []string{"grpo.group_size_by_phase.docker=8"}, nil},
		{"task sampler name", []string{"curriculum.task_sampler=hard"}, []string{`curriculum.task_sampler = "hard": must be one of epoch, pass-rate`}},
		{"pool floor zero", []string{"curriculum.pool_floor=0"}, []string{"curriculum.pool_floor = 0: must be in (0, 1]"}},
		{"reward weights", []string{"reward.test_weight=0.9"}, []string{"apply_bonus + test_weight must not exceed 1"}},
		{"similarity weight 1", []string{"reward.similarity_weight=1.0"}, []string{"reward.similarity_weight = 1: must be in [0, 1)"}},
		{"similarity weight negative", []string{"reward.similarity_weight=-0.1"}, []string{"reward.similarity_weight = -0.1: must be in [0, 1)"}},
		{"hunk credit", []string{"reward.hunk_credit=1.5"}, []string{"reward.hunk_credit = 1.5: must be between 0 and 1"}},
		{"shaping off", []string{"reward.similarity_weight=0", "reward.hunk_credit=0", "reward.reject_noop=false"}, nil},
		{"heads", []string{"model.heads=3"}, []string{"model.d_model = 128: must be a multiple of model.heads (3)"}},
		{"hosts", []string{`sandbox.hosts=["http://x"]`}, []string{"sandbox.hosts[0]"}},
		{"kubernetes host", []string{`sandbox.hosts=["k8s:///swetui", "unix:///x.sock"]`, "sandbox.user=1000:1000"}, nil},
		{"kubernetes user by name", []string{`sandbox.hosts=["k8s:///swetui"]`, "sandbox.user=swetui"},
			[]string{`sandbox.user = "swetui": must be numeric (uid[:gid]) with a Kubernetes host (k8s:///swetui)`}},
		{"kubernetes pull policy", []string{"sandbox.kubernetes.image_pull_policy=always"},
			[]string{`sandbox.kubernetes.image_pull_policy = "always": must be one of Always, IfNotPresent, Never`}},
		{"device cuda:1", []string{"model.device=cuda:1", `model.cuda_libs=["/opt/cuda/lib64"]`}, nil},
		{"device name", []string{"model.device=gpu"}, []string{`model.device = "gpu": must be "cpu", "cuda", "cuda:N", "cuda:all" or a list "cuda:0,1" of distinct GPUs`}},
		{"a GPU twice", []string{"model.device=cuda:0,1,0"}, []string{`model.device = "cuda:0,1,0": must be`}},
		{"an empty GPU", []string{"model.device=cuda:0,"}, []string{`model.device = "cuda:0,": must be`}},
		{"Dr. GRPO", []string{"grpo.scale_rewards=none", "grpo.loss_agg=seq-sum-constant"}, nil},
		{"GSPO", []string{"grpo.ratio=sequence", "grpo.clip_low=0.0003", "grpo.clip_high=0.0004"}, nil},
		{"ratio name", []string{"grpo.ratio=seq"}, []string{`grpo.ratio = "seq": must be one of token, sequence`}},
		{"DAPO overlong", []string{"grpo.overlong_buffer=64", "grpo.overlong_penalty=0.5"}, nil},
		{"overlong buffer negative", []string{"grpo.overlong_buffer=-1"}, []string{"grpo.overlong_buffer = -1: must be 0 (off) or more"}},
		{"overlong buffer past the cap", []string{"grpo.overlong_buffer=256"}, []string{"grpo.overlong_buffer = 256: must be below sample.max_new_tokens (256)"}},
		{"overlong penalty negative", []string{"grpo.overlong_buffer=8", "grpo.overlong_penalty=-1"}, []string{"grpo.overlong_penalty = -1: must be 0 or more"}},
		{"no KL", []string{"grpo.kl_coef=0"}, nil},
		{"prompt name", []string{"data.prompt=bm26"}, []string{`data.prompt = "bm26": must be one of oracle, bm25, text`}},
		{"agent executor name", []string{"agent.executor=ssh"}, []string{`agent.executor = "ssh": must be one of sandbox`}},
		{"save dtype", []string{"run.save_dtype=fp16"}, []string{`run.save_dtype = "fp16": must be one of auto, bf16, f32`}},
		{"save dtype bf16", []string{"run.save_dtype=bf16"}, nil},
		{"lora dropout", []string{"lora.rank=16", "lora.dropout=0.05"}, []string{"lora.dropout = 0.05: must be 0: GRPO's importance ratio"}},
		{"lora target", []string{"lora.rank=16", `lora.targets=["q_proj","lm_head"]`}, []string{`lora.targets = "lm_head": must be one of q_proj`}},
		{"lora rank", []string{"lora.rank=-1"}, []string{"lora.rank = -1: must be 0"}},
		{"lora on", []string{"lora.rank=16", "lora.alpha=32"}, nil},
		{"micro tokens", []string{"model.micro_tokens=0"}, []string{"model.micro_tokens = 0: must be at least 1"}},
		{"bm25 with a budget", []string{"data.prompt=bm25", "data.prompt_tokens=512"}, nil},
		{"prompt tokens negative", []string{"data.prompt_tokens=-1"}, []string{"data.prompt_tokens = -1: must be 0"}},
		{"prompt tokens past the context", []string{"data.prompt_tokens=900"},
			[]string{"data.prompt_tokens = 900: must be at most model.context - sample.max_new_tokens (768)"}},
		{"every problem at once", []string{"grpo.group_size=0", "sandbox.workers=0", "optim.schedule=step"},
			[]string{"3 problem(s)", "grpo.group_size", "sandbox.workers", "optim.schedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load("", nil, tt.overrides)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(cfg)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want a validation error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	cfg, err := Load("", nil, []string{"grpo.group_size=8", `sandbox.hosts=["tcp://a:1"]`})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Load("printed", out, nil)
	if err != nil {
		t.Fatalf("printed config does not load: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip changed the config")
	}
}

// floatKeys lists the dotted keys of every float field of the config.
func floatKeys(v reflect.Value, key string) []string {
	var keys []string
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ",")
			k := tag
			if key != "" {
				k = key + "." + tag
			}
			keys = append(keys, floatKeys(v.Field(i), k)...)
		}
	case reflect.Float64:
		keys = append(keys, key)
	}
	return keys
}

// TestValidateRejectsNonFinite: NaN and ±Inf are refused in every float
// key, the key named, whether from the command line or a file.
func TestValidateRejectsNonFinite(t *testing.T) {
	keys := floatKeys(reflect.ValueOf(Default()), "")
	if len(keys) < 19 {
		t.Fatalf("found %d float keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		for _, v := range []string{"nan", "inf", "-inf"} {
			cfg, err := Load("test.toml", nil, []string{k + "=" + v})
			if err != nil {
				t.Fatalf("%s=%s: load: %v", k, v, err)
			}
			err = Validate(cfg)
			if err == nil || !strings.Contains(err.Error(), k+" = ") || !strings.Contains(err.Error(), "must be a finite number") {
				t.Errorf("%s=%s: %v", k, v, err)
			}
		}
	}
	section, key, _ := strings.Cut(keys[0], ".")
	cfg, err := Load("f.toml", []byte("["+section+"]\n"+key+" = nan\n"), nil)
	if err != nil || Validate(cfg) == nil {
		t.Errorf("%s = nan in a file: load %v, validate %v", keys[0], err, Validate(cfg))
	}
}

// TestLoadSkipsBOM: a config file that starts with a UTF-8 byte-order mark
// loads as the same file without it.
func TestLoadSkipsBOM(t *testing.T) {
	cfg, err := Load("bom.toml", []byte("\xef\xbb\xbf[run]\nmax_steps = 3\n"), nil)
	if err != nil || cfg.Run.MaxSteps != 3 {
		t.Errorf("max_steps %d, err %v", cfg.Run.MaxSteps, err)
	}
}

func TestGroupSizeIn(t *testing.T) {
	g := Default().GRPO
	g.GroupSize, g.GroupSizeByPhase.ApplyOnly = 4, 8
	for _, tt := range []struct {
		phase string
		want  int
	}{{PhaseSyntax, 4}, {PhaseApplyOnly, 8}, {PhaseDocker, 4}} {
		if got := g.GroupSizeIn(tt.phase); got != tt.want {
			t.Errorf("GroupSizeIn(%s) = %d, want %d", tt.phase, got, tt.want)
		}
	}
}

// A recipe recorded before data.prompt existed reads as oracle prompts; one
// recorded since keeps its setting.
func TestDataJSONDefaultsPrompt(t *testing.T) {
	tests := []struct {
		name, in string
		want     Data
	}{
		{"recorded before data.prompt", `{"Source":"mini","MiniTasks":300}`, Data{Source: "mini", MiniTasks: 300, Prompt: PromptOracle}},
		{"recorded with it", `{"Source":"x.jsonl","Prompt":"bm25","PromptTokens":512}`, Data{Source: "x.jsonl", Prompt: PromptBM25, PromptTokens: 512}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Data
			if err := json.Unmarshal([]byte(tt.in), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	var d Data
	if err := json.Unmarshal([]byte(`{"Prompt": 3}`), &d); err == nil || !strings.Contains(err.Error(), "data:") {
		t.Fatalf("a wrong type: %v", err)
	}
}

// TestAgentContext: in agent mode the model runs at the larger of
// agent.context and model.context, whichever was raised, and training
// starts in the docker phase; single-shot runs keep model.context and
// curriculum.phase.
func TestAgentContext(t *testing.T) {
	for _, tt := range []struct {
		overrides []string
		want      int
	}{
		{nil, 1024},
		{[]string{"agent.context=8192"}, 1024},
		{[]string{"rollout.mode=agent"}, 4096},
		{[]string{"rollout.mode=agent", "model.context=8192"}, 8192},
		{[]string{"rollout.mode=agent", "agent.context=2048"}, 2048},
		{[]string{"agent.context=512", "rollout.mode=agent"}, 1024},
	} {
		cfg, err := Load("test", nil, tt.overrides)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Model.Context != tt.want {
			t.Errorf("%v: model.context %d, want %d", tt.overrides, cfg.Model.Context, tt.want)
		}
		if agent := cfg.Rollout.Mode == RolloutAgent; agent != (cfg.Curriculum.Phase == PhaseDocker) {
			t.Errorf("%v: rollout.mode %s starts in phase %s", tt.overrides, cfg.Rollout.Mode, cfg.Curriculum.Phase)
		}
	}
}

// TestAgentGroups: in agent mode agent.group_size and agent.max_groups
// replace grpo's (0 keeps grpo's; a step's first groups always count);
// single-shot runs keep grpo's.
func TestAgentGroups(t *testing.T) {
	for _, tt := range []struct {
		overrides       []string
		wantG, wantMaxG int
	}{
		{nil, 4, 8},
		{[]string{"agent.group_size=16", "agent.max_groups=1"}, 4, 8},
		{[]string{"rollout.mode=agent"}, 8, 2},
		{[]string{"rollout.mode=agent", "grpo.group_size=6"}, 8, 2},
		{[]string{"rollout.mode=agent", "agent.group_size=0", "agent.max_groups=0", "grpo.group_size=6"}, 6, 8},
		{[]string{"rollout.mode=agent", "grpo.prompts_per_step=3"}, 8, 3},
	} {
		cfg, err := Load("test", nil, tt.overrides)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.GRPO.GroupSize != tt.wantG || cfg.GRPO.MaxGroups != tt.wantMaxG {
			t.Errorf("%v: G %d, max groups %d; want %d, %d", tt.overrides, cfg.GRPO.GroupSize, cfg.GRPO.MaxGroups, tt.wantG, tt.wantMaxG)
		}
		if err := Validate(cfg); err != nil {
			t.Errorf("%v: %v", tt.overrides, err)
		}
	}
	if err := Validate(mustLoad(t, "rollout.mode=agent", "agent.group_size=1")); err == nil || !strings.Contains(err.Error(), "agent.group_size") {
		t.Errorf("agent.group_size=1: %v", err)
	}
}

func mustLoad(t *testing.T, overrides ...string) Config {
	t.Helper()
	cfg, err := Load("test", nil, overrides)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
