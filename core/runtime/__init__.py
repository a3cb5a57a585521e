"""The process around the pipeline: stop signals, helper processes, named crash and hold points."""
