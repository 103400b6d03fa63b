"""``sdlite bench``: benchmark_model-style timing of .tflite models / converted folders on a backend."""
