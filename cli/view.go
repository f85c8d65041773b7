package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/ui"
)

// viewOptions are `swetui view`'s inputs.
type viewOptions struct {
	Dir    string
	Filter string
	Follow time.Duration
	List   bool // print the selected completions instead of the console
}

func newViewOptions(env Env, args []string) (viewOptions, error) {
	fs := newFlags(env, "view")
	filter := fs.String("filter", "", `completions to show, words that combine: task=ID step=N-M phase=P outcome=O reward>=X adv<X text=S end=R turns>=N cmd=S sort=-reward`)
	follow := fs.Duration("follow", time.Second, "how often to look for what a run still training wrote")
	list := fs.Bool("list", false, "print the selected completions, one line each, instead of the console (also when stdout is not a terminal)")
	// The folder may come before or after the flags.
	dirs, overrides, err := parseAround(fs, args)
	if err != nil {
		return viewOptions{}, err
	}
	if len(overrides) > 0 {
		return viewOptions{}, UsageErrorf("view takes no config overrides (%s)", strings.Join(overrides, " "))
	}
	if len(dirs) != 1 {
		return viewOptions{}, UsageErrorf("view takes one run folder (run.out_dir), got %d", len(dirs))
	}
	if _, err := history.ParseFilter(*filter); err != nil {
		return viewOptions{}, UsageErrorf("--filter: %v", err)
	}
	return viewOptions{Dir: dirs[0], Filter: *filter, Follow: *follow, List: *list || !env.IsTerminal}, nil
}

// viewRun opens the console over a run's history, or prints the selection.
func viewRun(ctx context.Context, env Env, o viewOptions) error {
	if !o.List {
		vo := ui.ViewOptions{Dir: o.Dir, Filter: o.Filter, Follow: o.Follow}
		// The run's tokenizer names each token of a completion.
		if tok, err := model.LoadTokenizer(history.RunDir(o.Dir).Tokenizer()); err == nil {
			vo.Decode = func(id int) string { return tok.Decode([]int{id}) }
		}
		return ui.RunViewer(ctx, vo)
	}
	ix, err := history.Open(o.Dir)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	f, _ := history.ParseFilter(o.Filter)
	rows, err := ix.SelectIn(o.Dir, f)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	fmt.Fprintf(env.Stdout, "%d of %d completions (%d tasks) in %s\n", len(rows), len(ix.Entries), len(ix.Tasks), o.Dir)
	for _, i := range rows {
		e := ix.Entries[i]
		agent := ""
		if e.Agent() {
			agent = fmt.Sprintf(" end %s turns %d", e.EndName(), e.Turns)
		}
		fmt.Fprintf(env.Stdout, "%6d %d.%d %s %s reward %.3f adv %+.3f %s%s\n", e.Step, e.Group, e.Index, ix.Tasks[e.Task],
			history.Phases[e.Phase], e.Reward, e.Advantage, ui.OutcomeWord(e), agent)
	}
	return nil
}
