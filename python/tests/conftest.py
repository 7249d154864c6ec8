# The canfail directory holds a test that must fail; only the
# python-runner-canfail test runs it.
collect_ignore = ["canfail"]
