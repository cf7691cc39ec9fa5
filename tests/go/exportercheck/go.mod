module sluice.test/exportercheck

go 1.21

require github.com/lib/pq v1.10.9
