package provider

import "log/slog"

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func one(target string) []Target { return []Target{{Name: target, Address: "addr-of-" + target}} }
