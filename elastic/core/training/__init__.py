"""What a training program shows: steps read from its output, stalls, stragglers, stack frames that explain a hang."""
