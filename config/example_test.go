package config_test

import (
	"fmt"

	"github.com/swetui/swetui/config"
)

// Each override is key.path=value with the value read as TOML; text that is
// not TOML is a string, so only the first "=" splits.
func ExampleApplyOverride() {
	cfg := config.Default()
	for _, ov := range []string{
		"grpo.group_size=8",
		`sandbox.hosts=["unix:///var/run/docker.sock", "ssh://me@gpu-box"]`,
		"run.name=a=b",
	} {
		if err := config.ApplyOverride(&cfg, ov); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println(cfg.GRPO.GroupSize, cfg.Sandbox.Hosts, cfg.Run.Name)
	fmt.Println(config.ApplyOverride(&cfg, "grpo.group_size=eight"))
	// Output:
	// 8 [unix:///var/run/docker.sock ssh://me@gpu-box] a=b
	// override grpo.group_size=eight: want an integer, got the string "eight"
}
