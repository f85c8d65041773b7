module github.com/swetui/swetui

go 1.26.0

require (
	github.com/charmbracelet/x/term v0.2.2
	github.com/pelletier/go-toml/v2 v2.4.3
)

require golang.org/x/sys v0.47.0 // indirect
