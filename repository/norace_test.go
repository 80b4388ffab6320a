package repository_test

// raceEnabled is set under -race (race_test.go): the tests whose full size
// is only coverage run a part of it there, and all of it in the suite's
// pass without -race (scripts/test.sh).
var raceEnabled = false
