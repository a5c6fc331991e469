"""Training of the embedded default model: corpus, BPE tokenizer, target pretraining, DFlash drafter
training (REFERENCE.md section 2) and export to the HF checkpoint layout."""
