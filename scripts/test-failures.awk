# Prints what each failed Go test said, from the output of `go test` (verbose or not) mixed with
# make's and the daemons' lines: the `--- FAIL` line and the test's own `file.go:N:` messages
# under it. A failing end-to-end test dumps its components' logs (hundreds of lines) next to
# its message, so context by line count (grep -A) shows the logs and loses the message; this
# keeps the messages and drops the rest. Usage: awk -f scripts/test-failures.awk LOG
function trim(s) { return substr(s, 1, 300) }
# verbose output (-v): a test's messages come before its verdict, under the last
# "=== RUN/CONT/NAME" line that named it; the last few of each test are kept
/^=== (RUN|CONT|NAME) / {
  current = $3
  after = 0
  next
}
/^[[:space:]]+[A-Za-z0-9_.-]+\.go:[0-9]+: / {
  if (after > 0) { # non-verbose output: the messages follow the verdict
    print trim($0)
    after--
    next
  }
  if (current != "") {
    n = ++count[current]
    said[current, n] = trim($0)
    if (n > 6) delete said[current, n - 6]
  }
  next
}
/^[[:space:]]*--- FAIL: / {
  name = $3
  print ""
  print trim($0)
  for (i = count[name] - 5; i <= count[name]; i++) {
    if (i >= 1 && (name, i) in said) print "      (said) " said[name, i]
  }
  after = 12
  next
}
# a line with no indentation ends a non-verbose failure's messages
/^[^[:space:]]/ { after = 0 }
