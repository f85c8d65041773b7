package train

// What the external tests of the trainer on the real policies
// (policy_test.go, package train_test) use of the internal test helpers.
type (
	RewardFunc     = rewardFunc
	StaticPrompter = staticPrompter
)

var (
	TestConfig = testConfig
	FakeTasks  = fakeTasks
	Drain      = drain
	Mean       = mean
)
