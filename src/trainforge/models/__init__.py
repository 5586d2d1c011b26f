"""Model builders: the ViT (`models.vit`), Hugging Face models (`models.hf`, `models.hub`).

The package imports nothing itself: the web app and config validation read `models.hub`
without loading torch, which `models.vit` and `models.hf` need.
"""
