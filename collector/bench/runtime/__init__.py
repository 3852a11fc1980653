"""One module per Keras backend runtime (devices, strategies, precision, compilation, data, train loops, peak
memory, out-of-memory): imported only inside a trial process."""
