//go:build !race

package main

// raceEnabled tells whether the tests run with the race detector; the crmd
// binary the end-to-end tests run is then built with it too.
const raceEnabled = false
