// An unknown provider name lists the known ones.
type Net = fabric::direct!(provider = "verbs");

fn main() {}
