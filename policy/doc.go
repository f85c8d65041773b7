// Package policy holds the adapters from the trainer's ports (train.Policy,
// train.SnapshotSampler, train.Reference and train.Store) to the models:
// Model and ModelReference on the CPU transformer (package model, on
// gorgonia), Device and DeviceReference on a model/cuda device.
//
// Both write a checkpoint's policy/ and reference/ through model.Save, in
// the CPU model's format with the sampler's random source among the extra
// files (saveCheckpoint), so either policy resumes the other's. A LoRA
// policy (Model.UseLoRA on the CPU, which trains through merged weights;
// Model.AttachLoRA when a device computes) writes policy/ as a PEFT adapter
// folder and no reference/: its reference is the frozen base.
//
// It exists so that train links no model: train reaches the policy only
// through its ports, and this package and the command line's wiring are
// the only code that names both train and the model (docs/ARCHITECTURE.md
// §2).
package policy
