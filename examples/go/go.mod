module tally.example/tour

go 1.19
