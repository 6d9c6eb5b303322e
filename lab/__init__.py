"""softmax-lab: every softmax variant registered, checked against float64 and benchmarked."""
