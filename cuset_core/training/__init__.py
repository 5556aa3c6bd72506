"""Training: a transformers Trainer subclass, peft, callbacks, and the subprocess entry point."""
