"""`bitextmine train`: cross-lingual encoder training on line-aligned pairs with packed batches."""
