"""Offline validation of training-job files (legacy AI Platform ``trainingInput`` YAML and
Vertex AI ``CustomJobSpec`` YAML) before ``gcloud`` submits them. A developer tool: it runs
on the submitting machine, not in the image. See ``jobspec.check``."""
