"""Models of your own, for the trainer's --model=mymodels.MODULE:CALLABLE."""
