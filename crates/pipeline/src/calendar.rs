//! CF calendars as cftime reads them: the day number of a date and the date of a day number,
//! for the Gregorian calendar and the model calendars CMIP data use (`noleap`, `all_leap`,
//! `360_day`, `julian`). Day numbers count from an origin of each calendar's own; only their
//! differences (a date against the units' reference date) are used.

/// A CF `calendar` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Calendar {
    /// `standard`, `gregorian`, `proleptic_gregorian` (none given): proleptic Gregorian.
    Gregorian,
    /// `noleap`, `365_day`: no February 29.
    NoLeap,
    /// `all_leap`, `366_day`: a February 29 every year.
    AllLeap,
    /// `360_day`: twelve months of 30 days.
    Day360,
    /// `julian`: a leap year every fourth year.
    Julian,
}

const MONTH_DAYS: [i64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

impl Calendar {
    /// The calendar a coordinate's `calendar` attribute names (none: Gregorian).
    pub(crate) fn parse(name: Option<&str>) -> Result<Self, String> {
        let Some(name) = name else {
            return Ok(Self::Gregorian);
        };
        Ok(match name.to_ascii_lowercase().as_str() {
            "standard" | "gregorian" | "proleptic_gregorian" => Self::Gregorian,
            "noleap" | "365_day" => Self::NoLeap,
            "all_leap" | "366_day" => Self::AllLeap,
            "360_day" => Self::Day360,
            "julian" => Self::Julian,
            other => return Err(format!("calendar `{other}` is not one CF defines")),
        })
    }

    /// The days of `month` (1-12) of `year`.
    fn month_days(self, year: i64, month: i64) -> i64 {
        let leap = match self {
            Self::Gregorian => year % 4 == 0 && (year % 100 != 0 || year % 400 == 0),
            Self::Julian => year.rem_euclid(4) == 0,
            Self::AllLeap => true,
            Self::NoLeap => false,
            Self::Day360 => return 30,
        };
        MONTH_DAYS[(month - 1) as usize] + i64::from(month == 2 && leap)
    }

    /// The day number of a date, or why it is no date of this calendar (`2001-02-29` in
    /// `noleap`).
    pub(crate) fn days(self, year: i64, month: i64, day: i64) -> Result<i64, String> {
        if !(1..=12).contains(&month) || day < 1 || day > self.month_days(year, month) {
            return Err(format!(
                "{year:04}-{month:02}-{day:02} is not a date of the {self:?} calendar"
            ));
        }
        let before: i64 = (1..month).map(|m| self.month_days(year, m)).sum();
        Ok(self.year_start(year) + before + day - 1)
    }

    /// The day number of January 1 of `year`.
    fn year_start(self, year: i64) -> i64 {
        match self {
            Self::Gregorian => days_from_civil(year, 1, 1),
            Self::NoLeap => 365 * year,
            Self::AllLeap => 366 * year,
            Self::Day360 => 360 * year,
            // Year 0 is a leap year; so is every fourth one from it.
            Self::Julian => 365 * year + (year + 3).div_euclid(4),
        }
    }

    /// The date of a day number.
    pub(crate) fn date(self, days: i64) -> (i64, i64, i64) {
        if self == Self::Gregorian {
            return civil_from_days(days);
        }
        let length = match self {
            Self::Day360 => 360.0,
            Self::AllLeap => 366.0,
            _ => 365.25,
        };
        let mut year = (days as f64 / length).floor() as i64;
        while self.year_start(year) > days {
            year -= 1;
        }
        while self.year_start(year + 1) <= days {
            year += 1;
        }
        let mut rest = days - self.year_start(year);
        let mut month = 1;
        while rest >= self.month_days(year, month) {
            rest -= self.month_days(year, month);
            month += 1;
        }
        (year, month, rest + 1)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date of a day number since 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Calendar; 5] = [
        Calendar::Gregorian,
        Calendar::NoLeap,
        Calendar::AllLeap,
        Calendar::Day360,
        Calendar::Julian,
    ];

    #[test]
    fn every_date_round_trips_and_days_follow_each_other() {
        for calendar in ALL {
            let mut previous = None;
            for year in [-1i64, 0, 1, 3, 4, 5, 1900, 2000, 2001, 2004] {
                for month in 1..=12 {
                    for day in 1..=calendar.month_days(year, month) {
                        let days = calendar.days(year, month, day).unwrap();
                        assert_eq!(calendar.date(days), (year, month, day), "{calendar:?}");
                        if let Some((before, at)) = previous {
                            if at == (year, month, day - 1) || day == 1 && month > 1 {
                                assert_eq!(days, before + 1, "{calendar:?} {year}-{month}-{day}");
                            }
                        }
                        previous = Some((days, (year, month, day)));
                    }
                }
            }
        }
    }

    #[test]
    fn calendars_differ_where_cftime_says() {
        let span = |calendar: Calendar| {
            calendar.days(2001, 3, 1).unwrap() - calendar.days(2000, 3, 1).unwrap()
        };
        assert_eq!(span(Calendar::Gregorian), 365);
        assert_eq!(span(Calendar::NoLeap), 365);
        assert_eq!(span(Calendar::AllLeap), 366);
        assert_eq!(span(Calendar::Day360), 360);
        let february = |calendar: Calendar| {
            calendar.days(2001, 3, 1).unwrap() - calendar.days(2001, 2, 28).unwrap()
        };
        assert_eq!(february(Calendar::NoLeap), 1);
        assert_eq!(february(Calendar::AllLeap), 2);
        assert!(Calendar::NoLeap.days(2000, 2, 29).is_err());
        assert!(Calendar::Day360.days(2000, 2, 30).is_ok());
        assert!(Calendar::Julian.days(1900, 2, 29).is_ok());
        assert!(Calendar::Gregorian.days(1900, 2, 29).is_err());
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for days in [-800_000, -1, 0, 59, 11_016, 11_017, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert!(Calendar::parse(Some("lunar")).is_err());
    }
}
