"""The offline default embedding model (all-MiniLM-L6-v2, int8 ONNX) and its cache.
"""
