// Package rollout owns how a task's group of rollouts is played: the two
// peers behind the trainer's Rollouts port, Single (G replies, each
// holding a diff, graded together by the scorer) and Agent (G trajectories,
// each in its own sandbox session, a command a turn, its work tree's diff
// graded in a fresh sandbox as it ends), and what both give back (Group,
// Rollout). app picks the peer once, from rollout.mode; training and `swetui
// eval` play through the same peer, so a rollout is made one way.
//
// A third kind (a verifier-ranked one) is a third Player: the trainer,
// eval and the console read a Group, never the mode.
package rollout
