import Courier
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A table of text made to fit a terminal `width` columns wide without wrapping (`list`, `top`):
/// the columns that go early (`dropsEarly`) go, then columns shrink to a comfortable width (the
/// widest first), then to their minimum while the others that may go go (`dropOrder`, lowest
/// first). Cells are shortened with an ellipsis: in the middle for names,
/// so both ends stay and rows stay distinguishable; at the end for ids (a unique prefix is what
/// commands take) and prose. A column narrower than its header shows its `shortHeader`.
struct TableLayout {
    struct Column: Sendable {
        var header: String
        /// The header when the column is narrower than `header`.
        var shortHeader: String?
        /// The fewest characters the column shrinks to (at least its short header's).
        var minimum: Int
        /// Shortened in the middle (ids, names) rather than at the end (states, messages).
        var middle: Bool
        /// Which columns go first when the minimums do not fit: lower goes earlier; nil never goes.
        var dropOrder: Int?
        /// The width the column shrinks to before a column that goes early goes (at least `minimum`).
        var comfortable: Int
        /// Goes (in `dropOrder`) before any column shrinks below its comfortable width.
        var dropsEarly: Bool

        init(
            _ header: String, short: String? = nil, minimum: Int, comfortable: Int? = nil, middle: Bool = true,
            dropOrder: Int? = nil, dropsEarly: Bool = false
        ) {
            self.header = header
            self.shortHeader = short
            self.minimum = minimum
            self.comfortable = max(minimum, comfortable ?? minimum)
            self.middle = middle
            self.dropOrder = dropOrder
            self.dropsEarly = dropsEarly && dropOrder != nil
        }
    }

    var columns: [Column]
    /// Spaces between two columns.
    var gap = 2

    /// The lines of `rows` (cells in the order of `columns`) under the header line; with no
    /// `width`, every value in full (output that is not a terminal). No line is longer than `width`.
    func lines(_ rows: [[String]], width: Int?, header: Bool = true) -> [String] {
        let fitted = fit(rows, width: width)
        var lines: [String] = []
        if header { lines.append(join(fitted.headers, widths: fitted.widths)) }
        for row in rows {
            let cells = fitted.kept.enumerated().map { position, index in
                shorten(index < row.count ? row[index] : "", to: fitted.widths[position], middle: columns[index].middle)
            }
            lines.append(join(cells, widths: fitted.widths))
        }
        guard let width else { return lines }
        return lines.map { ProgressLayout.cut($0, width) }
    }

    /// Which columns are kept (indices into `columns`), how wide each is, and their headers.
    func fit(_ rows: [[String]], width: Int?) -> (kept: [Int], widths: [Int], headers: [String]) {
        var kept = Array(columns.indices)
        func natural(_ index: Int) -> Int {
            rows.reduce(columns[index].header.count) { max($0, index < $1.count ? $1[index].count : 0) }
        }
        // Phase 0: full widths, dropping the early columns; 1: comfortable widths, dropping none;
        // 2: minimums, dropping any that may go.
        var phase = 0
        while true {
            var widths = kept.map(natural)
            guard let width else { return (kept, widths, kept.map { columns[$0].header }) }
            let floors = kept.enumerated().map { position, index in
                let column = columns[index]
                let floor = phase == 0 ? widths[position] : phase == 1 ? column.comfortable : column.minimum
                return min(widths[position], max(floor, column.shortHeader?.count ?? 0))
            }
            func total() -> Int { widths.reduce(0, +) + gap * max(0, widths.count - 1) }
            // Shrink the column furthest above its floor, one character at a time.
            while total() > width {
                let shrinkable = widths.indices.filter { widths[$0] > floors[$0] }
                guard let position = shrinkable.max(by: { widths[$0] - floors[$0] < widths[$1] - floors[$1] }) else { break }
                widths[position] -= 1
            }
            let droppable = kept.enumerated().filter {
                columns[$0.element].dropOrder != nil && (phase == 2 || (phase == 0 && columns[$0.element].dropsEarly))
            }
            if total() <= width || (droppable.isEmpty && phase == 2) {
                let headers = kept.enumerated().map { position, index in
                    let column = columns[index]
                    if column.header.count <= widths[position] { return column.header }
                    return column.shortHeader ?? ProgressLayout.cut(column.header, widths[position])
                }
                return (kept, widths, headers)
            }
            if droppable.isEmpty {
                phase += 1
                continue
            }
            let drop = droppable.min { (columns[$0.element].dropOrder ?? 0) < (columns[$1.element].dropOrder ?? 0) }
            if let drop { kept.remove(at: drop.offset) }
        }
    }

    private func shorten(_ text: String, to width: Int, middle: Bool) -> String {
        middle ? ProgressLayout.middleCut(text, width) : ProgressLayout.cut(text, width)
    }

    private func join(_ cells: [String], widths: [Int]) -> String {
        cells.enumerated().map { position, cell in
            position == cells.count - 1 ? cell : cell.padding(toLength: widths[position], withPad: " ", startingAt: 0)
        }.joined(separator: String(repeating: " ", count: gap))
    }

    /// The width of the terminal standard output is (`TIOCGWINSZ`), else `COLUMNS` when it names
    /// a positive number, else 80; nil when standard output is not a terminal (full values).
    static func stdoutWidth(environment: [String: String] = ProcessInfo.processInfo.environment) -> Int? {
        guard isatty(STDOUT_FILENO) == 1 else { return nil }
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        if let columns = environment["COLUMNS"].flatMap(Int.init), columns > 0, columns < 10_000 { return columns }
        return 80
    }
}
