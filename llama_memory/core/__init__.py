"""The leaves every layer shares: plain data types, errors, text and message helpers,
instrumentation, the async bridge, progress and LLM cost metering.
"""
