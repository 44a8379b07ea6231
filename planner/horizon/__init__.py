"""Plans over time: daily slots, growth, owned + reserved + rented capacity, a procurement schedule."""
