module sluice.test/promcheck

go 1.21

require github.com/prometheus/common v0.60.1

require (
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	google.golang.org/protobuf v1.34.2 // indirect
)
