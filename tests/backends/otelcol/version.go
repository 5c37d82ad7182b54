package main

// version is the core collector release this module pins in go.mod.
const version = "0.165.0"
