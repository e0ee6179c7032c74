//! Channels computed, not stored: named in the channel list like variables
//! ([`SampleLayout::new`](crate::SampleLayout::new)), computed by the collators on each
//! sample's own grid and time (`zarrpipe-collate`'s `DerivedChannels` holds the formulas).

/// A channel computed from a sample's coordinates. Names follow earthkit-data's forcings
/// where they exist (`cos_local_time`); `*_day_of_year` are its `*_julian_day`, `cos_zenith`
/// its `cos_solar_zenith_angle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Derived {
    /// Sine of the latitude.
    SinLat,
    /// Cosine of the latitude.
    CosLat,
    /// Sine of the longitude.
    SinLon,
    /// Cosine of the longitude.
    CosLon,
    /// Time of day in UTC, `2 pi hours / 24`.
    SinTimeOfDay,
    /// Cosine of the time-of-day angle.
    CosTimeOfDay,
    /// Local solar time, `2 pi (hours + longitude / 15) / 24`.
    SinLocalTime,
    /// Cosine of the local-time angle.
    CosLocalTime,
    /// `2 pi day / 365.25`, `day` counted from 1 January 00:00 of the year, with its fraction.
    SinDayOfYear,
    /// Cosine of the day-of-year angle.
    CosDayOfYear,
    /// Cosine of the solar zenith angle, 0 at night.
    CosZenith,
}

/// Which coordinates a derived channel depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// On the latitude coordinate.
    pub latitude: bool,
    /// On the longitude coordinate.
    pub longitude: bool,
    /// On the time coordinate.
    pub time: bool,
}

impl Derived {
    /// Every derived channel, in the order the docs list them.
    pub const ALL: [Derived; 11] = [
        Derived::SinLat,
        Derived::CosLat,
        Derived::SinLon,
        Derived::CosLon,
        Derived::SinTimeOfDay,
        Derived::CosTimeOfDay,
        Derived::SinLocalTime,
        Derived::CosLocalTime,
        Derived::SinDayOfYear,
        Derived::CosDayOfYear,
        Derived::CosZenith,
    ];

    /// Its name in channel lists.
    pub fn name(self) -> &'static str {
        match self {
            Derived::SinLat => "sin_lat",
            Derived::CosLat => "cos_lat",
            Derived::SinLon => "sin_lon",
            Derived::CosLon => "cos_lon",
            Derived::SinTimeOfDay => "sin_time_of_day",
            Derived::CosTimeOfDay => "cos_time_of_day",
            Derived::SinLocalTime => "sin_local_time",
            Derived::CosLocalTime => "cos_local_time",
            Derived::SinDayOfYear => "sin_day_of_year",
            Derived::CosDayOfYear => "cos_day_of_year",
            Derived::CosZenith => "cos_zenith",
        }
    }

    /// The derived channel of this name, if there is one.
    pub fn from_name(name: &str) -> Option<Derived> {
        Derived::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The names of every derived channel, for error messages.
    pub fn names() -> String {
        let names: Vec<&str> = Derived::ALL.iter().map(|kind| kind.name()).collect();
        names.join(", ")
    }

    /// The coordinates its values depend on.
    pub fn needs(self) -> Needs {
        let (latitude, longitude, time) = match self {
            Derived::SinLat | Derived::CosLat => (true, false, false),
            Derived::SinLon | Derived::CosLon => (false, true, false),
            Derived::SinTimeOfDay
            | Derived::CosTimeOfDay
            | Derived::SinDayOfYear
            | Derived::CosDayOfYear => (false, false, true),
            Derived::SinLocalTime | Derived::CosLocalTime => (false, true, true),
            Derived::CosZenith => (true, true, true),
        };
        Needs {
            latitude,
            longitude,
            time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in Derived::ALL {
            assert_eq!(Derived::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Derived::from_name("cos_latitude"), None);
        assert!(Derived::names().starts_with("sin_lat, cos_lat,"));
    }
}
