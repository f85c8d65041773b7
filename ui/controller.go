package ui

// Controller is how the console steers a run (train.Trainer implements it).
// Every method returns at once; the run acknowledges with an event.
type Controller interface {
	Pause()
	Resume()
	SetPhase(phase string)
	SetAuto(on bool)
	SaveNow()
	Stop()
	// Replay re-scores one (task, completion) through the reward pool; the
	// verdict arrives as a CompletionScored with Step -1.
	Replay(instanceID, completion string)
}
