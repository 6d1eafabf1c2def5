import Foundation

extension CourierError {
    /// The one wording of a space refusal, in readable units, with the reserve named by its
    /// setting and the next step: "not enough disk space at /data: 1000 B + 64 MiB reserve
    /// (transfer.diskReserve) needed, 20 MiB free" (hint: "free 44 MiB there, or lower
    /// transfer.diskReserve; then resume").
    public static func notEnoughSpace(
        at folder: String, bytes: Int64, reserve: Int64, reserveSetting: String, available: Int64, then: String = "resume"
    ) -> CourierError {
        let bytes = max(bytes, 0)
        let reserve = max(reserve, 0)
        let needed = SpaceCheck.sum(bytes, reserve)
        let free = max(available, 0)
        // Before a length is known (a server that has not answered yet) only the reserve is
        // checked: say so, not "0 B + 64 MiB reserve needed".
        let what = reserve > 0
            ? (bytes == 0
                ? "the \(readableBytes(reserve)) reserve (\(reserveSetting)) must stay free"
                : "\(readableBytes(bytes)) + \(readableBytes(reserve)) reserve (\(reserveSetting)) needed")
            : "\(readableBytes(bytes)) needed"
        let missing = needed == .max ? "more than any disk holds" : readableBytes(needed - free)
        let lower = reserve > 0 ? ", or lower \(reserveSetting)" : ""
        return CourierError(
            .insufficientSpace, "not enough disk space at \(folder): \(what), \(readableBytes(free)) free",
            hint: "free \(missing) there\(lower); then \(then)")
    }

    /// `count` bytes in binary units with one decimal where it helps: "1000 B", "64 MiB", "1.5 GiB";
    /// with `alwaysDecimal` (progress and tables, whose widths then hold still) "64.0 MiB".
    /// The one byte formatter; "? B" for a count that is not finite.
    public static func readableBytes<Count: BinaryInteger>(_ count: Count, alwaysDecimal: Bool = false) -> String {
        readableBytes(Double(count), alwaysDecimal: alwaysDecimal)
    }

    public static func readableBytes(_ count: Double, alwaysDecimal: Bool = false) -> String {
        guard count.isFinite else { return "? B" }
        if count < 1024 { return "\(Int(count)) B" }
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
        var value = count / 1024
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        let rounded = alwaysDecimal ? value : (value * 10).rounded() / 10
        return !alwaysDecimal && rounded == rounded.rounded()
            ? "\(Int(rounded)) \(units[unit])" : String(format: "%.1f %@", rounded, units[unit])
    }
}
