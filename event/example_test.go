package event_test

import (
	"fmt"

	"github.com/swetui/swetui/event"
)

// A subscriber that does not keep up loses high-rate events (here log
// batches), counted, and never holds the producer up.
func ExampleBus() {
	bus := event.NewBus()
	console := bus.Subscribe(64)
	slow := bus.Subscribe(1)
	for i := 1; i <= 3; i++ {
		bus.Publish(event.LogBatch{EvalID: "e1", Lines: []string{fmt.Sprint("line ", i)}})
	}
	bus.Close() // after what is in flight: every channel is closed
	for _, s := range []*event.Sub{console, slow} {
		n := 0
		for range s.Events() {
			n++
		}
		fmt.Printf("got %d, dropped %d\n", n, s.Dropped().Logs)
	}
	// Output:
	// got 3, dropped 0
	// got 1, dropped 2
}
